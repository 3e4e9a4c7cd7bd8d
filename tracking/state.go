package tracking

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/keyhook/keyhook/tracking/offsets"
	"github.com/redis/go-redis/v9"
)

// PartitionState is the stored tracking state of one partition, as the
// status API shows it. Counts and times are as of the owner's last flush.
type PartitionState struct {
	// Topic and Partition name the partition within its subscription.
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Owner is the node that holds the partition, "" after a graceful
	// release.
	Owner string `json:"owner"`
	// Epoch identifies the current ownership; every claim raises it.
	Epoch int64 `json:"epoch"`
	// Generation is the Kafka group generation the owner claimed under.
	Generation int32 `json:"generation"`
	// Watermark is the lowest offset not acked.
	Watermark int64 `json:"watermark"`
	// Fetched is the next offset the owner will fetch.
	Fetched int64 `json:"fetched"`
	// Committed mirrors the last Kafka commit, -1 if none.
	Committed int64 `json:"committed"`
	// Pending counts fetched offsets at or above the watermark not acked.
	Pending int64 `json:"pending"`
	// InFlight counts records being delivered to the endpoint.
	InFlight int64 `json:"in_flight"`
	// Keys counts the keys with a record in flight or queued.
	Keys int64 `json:"keys"`
	// AckedRanges are the acked offsets at or above the watermark, as
	// half-open ranges; empty, not null, when there are none.
	AckedRanges []offsets.Range `json:"acked_ranges"`
	// Oldest is when the oldest pending record was dispatched; zero when
	// nothing is pending.
	Oldest time.Time `json:"oldest_pending,omitzero"`
	// Claimed is when the current owner claimed the partition.
	Claimed time.Time `json:"claimed,omitzero"`
	// Updated is when the state was last claimed, flushed or released.
	Updated time.Time `json:"updated"`
	// Acked is the same offsets as AckedRanges, ready for set operations.
	// Never nil.
	Acked *offsets.Set `json:"-"`
	// TopicID is the Kafka topic ID the offsets belong to, as the last
	// claim recorded it; "" when no claim knew it. Offsets of another ID
	// are those of a deleted topic of the same name.
	TopicID string `json:"-"`
}

// Load reads the states of pks in one pipelined round trip. Partitions
// without state are absent from the result.
func (s *Store) Load(ctx context.Context, pks []PartitionKey) (map[PartitionKey]PartitionState, error) {
	out := make(map[PartitionKey]PartitionState, len(pks))
	if len(pks) == 0 {
		return out, nil
	}
	for _, pk := range pks {
		if err := pk.validate(); err != nil {
			return nil, fmt.Errorf("tracking: load: %w", err)
		}
	}
	cmds := make([]*redis.MapStringStringCmd, len(pks))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, pk := range pks {
			cmds[i] = p.HGetAll(ctx, s.key(pk))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("tracking: load: %w", err)
	}
	for i, pk := range pks {
		h := cmds[i].Val()
		if len(h) == 0 {
			continue
		}
		st, err := decodeState(pk, h)
		if err != nil {
			return nil, fmt.Errorf("tracking: load %s: %w", pk, err)
		}
		out[pk] = st
	}
	return out, nil
}

// decodeState turns a tracking HASH into a PartitionState. Fields a
// freshly claimed partition has not written yet read as zero, and the
// commit mirror as -1.
func decodeState(pk PartitionKey, h map[string]string) (PartitionState, error) {
	d := hashDecoder{h: h}
	st := PartitionState{
		Topic:      pk.Topic,
		Partition:  pk.Partition,
		Owner:      h[fieldOwner],
		Epoch:      d.int(fieldEpoch, 0),
		Generation: int32(d.int(fieldGen, 0)),
		Watermark:  d.int(fieldWatermark, 0),
		Fetched:    d.int(fieldFetched, 0),
		Committed:  d.int(fieldCommitted, -1),
		Pending:    d.int(fieldPending, 0),
		InFlight:   d.int(fieldInFlight, 0),
		Keys:       d.int(fieldKeys, 0),
		Oldest:     d.time(fieldOldest),
		Claimed:    d.time(fieldClaimed),
		Updated:    d.time(fieldUpdated),
		Acked:      new(offsets.Set),
		TopicID:    h[fieldTopicID],
	}
	if d.err != nil {
		return PartitionState{}, d.err
	}
	if b := h[fieldAcked]; b != "" {
		if err := st.Acked.UnmarshalBinary([]byte(b)); err != nil {
			return PartitionState{}, fmt.Errorf("field %s: %w", fieldAcked, err)
		}
	}
	st.AckedRanges = st.Acked.Ranges()
	if st.AckedRanges == nil {
		st.AckedRanges = []offsets.Range{}
	}
	return st, nil
}

// hashDecoder parses HASH fields, keeping the first error.
type hashDecoder struct {
	h   map[string]string
	err error
}

func (d *hashDecoder) int(field string, missing int64) int64 {
	v, ok := d.h[field]
	if !ok {
		return missing
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil && d.err == nil {
		d.err = fmt.Errorf("field %s: %w", field, err)
	}
	return n
}

func (d *hashDecoder) time(field string) time.Time {
	ms := d.int(field, 0)
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}
