package tracking

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/keyhook/keyhook/keyrange"

	"github.com/keyhook/keyhook/tracking/offsets"
	"github.com/redis/go-redis/v9"
)

// PartitionState is the stored tracking state of one partition, as the
// status API shows it. Counts and times are as of the claims' last
// flushes. Several claims may share the partition, each over some hash
// ranges; the fields sum them up and Ranges details them.
type PartitionState struct {
	// Topic and Partition name the partition within its subscription.
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Owner is the node whose claim holds the whole hash space; "" after
	// a graceful release, or while the space is shared.
	Owner string `json:"owner"`
	// Epoch is the last epoch issued; every claim, and every release of
	// some of a claim's ranges, raises it.
	Epoch int64 `json:"epoch"`
	// Generation is the Kafka group generation of the newest claim.
	Generation int32 `json:"generation"`
	// Watermark is the merged watermark: every record below it was
	// delivered, whatever its hash (the least of the ranges'); -1 while
	// any range's is unknown.
	Watermark int64 `json:"watermark"`
	// Fetched is the furthest next offset a claim will fetch.
	Fetched int64 `json:"fetched"`
	// Committed mirrors the last Kafka commit, -1 if none.
	Committed int64 `json:"committed"`
	// Pending counts fetched offsets at or above the watermarks not
	// acked, over the live claims.
	Pending int64 `json:"pending"`
	// InFlight counts records being delivered to the endpoint.
	InFlight int64 `json:"in_flight"`
	// Keys counts the keys with a record in flight or queued.
	Keys int64 `json:"keys"`
	// AckedRanges are the offsets the stored claims acked at or above
	// their watermarks, as half-open ranges; empty, not null, when there
	// are none.
	AckedRanges []offsets.Range `json:"acked_ranges"`
	// Oldest is when the oldest pending record was dispatched; zero when
	// nothing is pending.
	Oldest time.Time `json:"oldest_pending,omitzero"`
	// Claimed is when the newest claim was made.
	Claimed time.Time `json:"claimed,omitzero"`
	// Updated is when a claim was last made, flushed or released.
	Updated time.Time `json:"updated"`
	// Ranges are the stored pieces of the hash space, in hash order.
	Ranges []RangeState `json:"ranges,omitempty"`
	// Holding is the record the partition's watermark waits for: the
	// lowest of the live claims', nil when nothing is pending.
	Holding *Holding `json:"holding,omitempty"`
	// Stalled are the keys not flowing the live claims stored, each
	// with the owner of its claim, in offset order; StalledTotal counts
	// them all, those a claim counted but did not store included.
	Stalled      []OwnedStalledKey `json:"-"`
	StalledTotal int               `json:"-"`
	// Acked is the same offsets as AckedRanges, ready for set operations.
	// Never nil.
	Acked *offsets.Set `json:"-"`
	// TopicID is the Kafka topic ID the offsets belong to, as the last
	// claim recorded it; "" when no claim knew it. Offsets of another ID
	// are those of a deleted topic of the same name.
	TopicID string `json:"-"`
}

// OwnedStalledKey is a key not flowing and the node whose claim stored it.
type OwnedStalledKey struct {
	StalledKey
	Owner string
}

// RangeState is one stored piece of a partition's hash space: the hashes
// [Lo, Hi) and the claim they belong to.
type RangeState struct {
	Lo uint32 `json:"lo"`
	Hi uint32 `json:"hi"`
	// Owner is the node of the claim holding the range; "" when it was
	// released or never claimed.
	Owner string `json:"owner"`
	// Epoch and Generation are the claim's; 0 when never claimed.
	Epoch      int64 `json:"epoch"`
	Generation int32 `json:"generation"`
	// Watermark is what is known of the range: every record below it
	// whose hash is in the range was delivered; -1 nothing known.
	Watermark int64 `json:"watermark"`
	// Fetched, Pending, InFlight and Keys are the claim's, as it last
	// flushed them; the last three are 0 once the range is released.
	Fetched  int64 `json:"fetched"`
	Pending  int64 `json:"pending"`
	InFlight int64 `json:"in_flight"`
	Keys     int64 `json:"keys"`
	// Claimed and Updated are the claim's times.
	Claimed time.Time `json:"claimed,omitzero"`
	Updated time.Time `json:"updated,omitzero"`
	// Holding is the record the range's claim waits for, nil when none
	// or released.
	Holding *Holding `json:"holding,omitempty"`
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
// freshly made claim has not written yet read as zero, the commit mirror
// as -1, and a range nothing is known of has watermark -1. A HASH of the
// layout before range claims reads as one claim of the whole space, as
// the scripts' upgrade rewrites it.
func decodeState(pk PartitionKey, h map[string]string) (PartitionState, error) {
	top := make(map[string]string)
	byEpoch := make(map[int64]map[string]string)
	for k, v := range h {
		rest, ok := strings.CutPrefix(k, claimPrefix)
		if !ok {
			top[k] = v
			continue
		}
		es, name, ok := strings.Cut(rest, ":")
		e, err := strconv.ParseInt(es, 10, 64)
		if !ok || err != nil {
			return PartitionState{}, fmt.Errorf("field %s: not a claim's", k)
		}
		if byEpoch[e] == nil {
			byEpoch[e] = make(map[string]string)
		}
		byEpoch[e][name] = v
	}
	d := hashDecoder{h: top}
	st := PartitionState{
		Topic:     pk.Topic,
		Partition: pk.Partition,
		Epoch:     d.int(fieldEpoch, 0),
		Committed: d.int(fieldCommitted, -1),
		Acked:     new(offsets.Set),
		TopicID:   top[fieldTopicID],
	}
	ps := unclaimed()
	if p, ok := top[fieldPieces]; ok {
		var err error
		if ps, err = parsePieces(p); err != nil {
			return PartitionState{}, fmt.Errorf("field %s: %w", fieldPieces, err)
		}
	}
	if _, legacy := top[fieldGen]; legacy {
		wm := max(d.int(fieldWatermark, -1), st.Committed)
		if _, ok := top[fieldPieces]; ok {
			wm = max(wm, mergedWatermark(ps))
		}
		c := make(map[string]string)
		for _, name := range legacyClaimFields {
			if v, ok := top[name]; ok {
				c[name] = v
			}
		}
		byEpoch = map[int64]map[string]string{st.Epoch: c}
		ps = []piece{{lo: 0, hi: keyrange.Space, epoch: st.Epoch, released: top[fieldOwner] == "", watermark: wm}}
	}
	if d.err != nil {
		return PartitionState{}, d.err
	}

	claims := make(map[int64]claimState, len(byEpoch))
	var newest int64 = -1
	for e, fields := range byEpoch {
		c, err := decodeClaimState(fields)
		if err != nil {
			return PartitionState{}, fmt.Errorf("claim %d: %w", e, err)
		}
		claims[e] = c
		st.Acked.Union(c.acked)
		st.Fetched = max(st.Fetched, c.fetched)
		if c.updated.After(st.Updated) {
			st.Updated = c.updated
		}
	}
	live := make(map[int64]bool)
	for _, p := range ps {
		if p.epoch != 0 && !p.released {
			live[p.epoch] = true
		}
	}
	// The newest claim is the newest live one, or else the newest stored.
	for e, c := range claims {
		if (live[e] && !live[newest]) || (live[e] == live[newest] && e > newest) {
			newest = e
			st.Generation, st.Claimed = c.gen, c.claimed
		}
	}
	for e := range live {
		c := claims[e]
		st.Pending += c.pending
		st.InFlight += c.inflight
		st.Keys += c.keys
		if !c.oldest.IsZero() && (st.Oldest.IsZero() || c.oldest.Before(st.Oldest)) {
			st.Oldest = c.oldest
		}
		if len(live) == 1 && held(ps, e).IsFull() {
			st.Owner = c.owner
		}
		if c.holding != nil && (st.Holding == nil || c.holding.Offset < st.Holding.Offset) {
			st.Holding = c.holding
		}
		if c.stalled != nil {
			for _, k := range c.stalled.Keys {
				st.Stalled = append(st.Stalled, OwnedStalledKey{StalledKey: k, Owner: c.owner})
			}
			st.StalledTotal += max(c.stalled.Total, len(c.stalled.Keys))
		}
	}
	sort.Slice(st.Stalled, func(i, j int) bool { return st.Stalled[i].Offset < st.Stalled[j].Offset })
	st.Watermark = mergedWatermark(ps)
	for _, p := range ps {
		c := claims[p.epoch]
		r := RangeState{Lo: p.lo, Hi: p.hi, Epoch: p.epoch, Generation: c.gen, Watermark: p.watermark,
			Fetched: c.fetched, Claimed: c.claimed, Updated: c.updated}
		if !p.released {
			r.Owner, r.Pending, r.InFlight, r.Keys, r.Holding = c.owner, c.pending, c.inflight, c.keys, c.holding
		}
		st.Ranges = append(st.Ranges, r)
	}
	st.AckedRanges = st.Acked.Ranges()
	if st.AckedRanges == nil {
		st.AckedRanges = []offsets.Range{}
	}
	return st, nil
}

// legacyClaimFields are the claim's fields the layout before range claims
// kept at the top of the HASH.
var legacyClaimFields = []string{fieldOwner, fieldGen, fieldAcked, fieldFetched, fieldPending, fieldInFlight,
	fieldKeys, fieldOldest, fieldClaimed, fieldUpdated}

// claimState is one stored claim's fields.
type claimState struct {
	owner                            string
	gen                              int32
	fetched, pending, inflight, keys int64
	oldest, claimed, updated         time.Time
	acked                            *offsets.Set
	holding                          *Holding
	stalled                          *StalledKeys
}

func decodeClaimState(h map[string]string) (claimState, error) {
	d := hashDecoder{h: h}
	c := claimState{
		owner:    h[fieldOwner],
		gen:      int32(d.int(fieldGen, 0)),
		fetched:  d.int(fieldFetched, 0),
		pending:  d.int(fieldPending, 0),
		inflight: d.int(fieldInFlight, 0),
		keys:     d.int(fieldKeys, 0),
		oldest:   d.time(fieldOldest),
		claimed:  d.time(fieldClaimed),
		updated:  d.time(fieldUpdated),
		acked:    new(offsets.Set),
	}
	if d.err != nil {
		return claimState{}, d.err
	}
	if b := h[fieldAcked]; b != "" {
		if err := c.acked.UnmarshalBinary([]byte(b)); err != nil {
			return claimState{}, fmt.Errorf("field %s: %w", fieldAcked, err)
		}
	}
	if b := h[fieldStalled]; b != "" {
		c.stalled = new(StalledKeys)
		if err := json.Unmarshal([]byte(b), c.stalled); err != nil {
			return claimState{}, fmt.Errorf("field %s: %w", fieldStalled, err)
		}
	}
	if b := h[fieldHolding]; b != "" {
		c.holding = new(Holding)
		if err := json.Unmarshal([]byte(b), c.holding); err != nil {
			return claimState{}, fmt.Errorf("field %s: %w", fieldHolding, err)
		}
	}
	return c, nil
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
