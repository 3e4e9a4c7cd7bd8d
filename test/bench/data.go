package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Special keys a scenario may carry; the key of index 0.
const (
	specialNone = ""
	// specialSlow is one key whose requests take the sink's SlowLatency.
	specialSlow = "slow"
	// specialHot is one key carrying a large share of the records.
	specialHot = "hot"
	// specialFailing is one key whose requests the sink answers 503
	// until the run's failUntil.
	specialFailing = "failing"
)

// dataSpec describes a scenario's records. The same spec always yields the
// same records, so a child process (ceiling A) can rebuild them.
type dataSpec struct {
	Records    int `json:"records"`
	Keys       int `json:"keys"`
	ValueBytes int `json:"value_bytes"`
	// Special names the role of key 0 ("slow", "hot") or is empty; it
	// carries SpecialShare of the records.
	Special      string  `json:"special,omitempty"`
	SpecialShare float64 `json:"special_share,omitempty"`
	Seed         uint64  `json:"seed"`
}

// dataset is the records of a dataSpec, by record id (0..Records-1).
type dataset struct {
	spec dataSpec
	// key is each record's key index: 0 is the special key, 1..Keys the
	// ordinary ones.
	key []uint32
	// seq is each record's position among the records of its key.
	seq []uint32
	// keyRecords counts the records of each key index.
	keyRecords []uint32
	// prev is the id of the previous record of the same key, -1 for a
	// key's first.
	prev []int32
}

func newDataset(s dataSpec) *dataset {
	d := &dataset{
		spec:       s,
		key:        make([]uint32, s.Records),
		seq:        make([]uint32, s.Records),
		keyRecords: make([]uint32, s.Keys+1),
		prev:       make([]int32, s.Records),
	}
	last := make([]int32, s.Keys+1)
	for i := range last {
		last[i] = -1
	}
	rng := rand.New(rand.NewPCG(s.Seed, 0x6b6579686f6f6b))
	for i := range s.Records {
		k := uint32(1 + rng.IntN(s.Keys))
		if s.Special != specialNone && rng.Float64() < s.SpecialShare {
			k = 0
		}
		d.key[i] = k
		d.prev[i], last[k] = last[k], int32(i)
		d.seq[i] = d.keyRecords[k]
		d.keyRecords[k]++
	}
	return d
}

// keyName is the Kafka key of key index k.
func (d *dataset) keyName(k uint32) []byte {
	if k == 0 {
		return []byte("key-" + d.spec.Special)
	}
	return []byte(fmt.Sprintf("key-%05d", k))
}

// specialRecords counts the records of the special key (0 without one).
func (d *dataset) specialRecords() int {
	if d.spec.Special == specialNone {
		return 0
	}
	return int(d.keyRecords[0])
}

// Record bodies start with a fixed header the sink decodes; the rest is
// padding up to ValueBytes:
//
//	0  "KHB1"
//	4  record id   uint32
//	8  key index   uint32
//	12 seq in key  uint32
//	16 timestamp   int64, unix nanoseconds (the Kafka record's timestamp)
const (
	bodyMagic  = "KHB1"
	bodyHeader = 24
)

// body renders record id with timestamp ts.
func (d *dataset) body(id int, ts time.Time) []byte {
	n := max(d.spec.ValueBytes, bodyHeader)
	b := make([]byte, n)
	copy(b, bodyMagic)
	binary.BigEndian.PutUint32(b[4:], uint32(id))
	binary.BigEndian.PutUint32(b[8:], d.key[id])
	binary.BigEndian.PutUint32(b[12:], d.seq[id])
	binary.BigEndian.PutUint64(b[16:], uint64(ts.UnixNano()))
	for i := bodyHeader; i < n; i++ {
		b[i] = 'a' + byte(i%26)
	}
	return b
}

// bodyInfo is what the sink reads from a body.
type bodyInfo struct {
	id, key, seq uint32
	ts           int64
}

var errBadBody = errors.New("bench: body is not a bench record")

func parseBody(b []byte) (bodyInfo, error) {
	if len(b) < bodyHeader || string(b[:4]) != bodyMagic {
		return bodyInfo{}, errBadBody
	}
	return bodyInfo{
		id:  binary.BigEndian.Uint32(b[4:]),
		key: binary.BigEndian.Uint32(b[8:]),
		seq: binary.BigEndian.Uint32(b[12:]),
		ts:  int64(binary.BigEndian.Uint64(b[16:])),
	}, nil
}
