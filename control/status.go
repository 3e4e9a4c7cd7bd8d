package control

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
)

// StateLoader reads flushed partition states; tracking.Store implements it.
type StateLoader interface {
	Load(ctx context.Context, pks []tracking.PartitionKey) (map[tracking.PartitionKey]tracking.PartitionState, error)
}

// StatusReader joins what Kafka knows about a subscription's group (commits,
// log ends) with the tracking state its owners flushed.
type StatusReader struct {
	adm    *kadm.Client
	states StateLoader
}

// NewStatusReader builds a reader over an admin client and the tracker.
func NewStatusReader(adm *kadm.Client, states StateLoader) *StatusReader {
	return &StatusReader{adm: adm, states: states}
}

// Status reports every partition of the subscription's topics.
func (r *StatusReader) Status(ctx context.Context, s *subscription.Subscription) (*subscription.Status, error) {
	ends, err := kafkaCall(ctx, func(ctx context.Context) (kadm.ListedOffsets, error) { return r.adm.ListEndOffsets(ctx, s.Topics...) })
	if err != nil {
		return nil, fmt.Errorf("control: status: list end offsets: %w", err)
	}
	commits, err := kafkaCall(ctx, func(ctx context.Context) (kadm.OffsetResponses, error) { return r.adm.FetchOffsets(ctx, s.GroupID()) })
	// No node has consumed yet: no group, nothing committed.
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return nil, fmt.Errorf("control: status: fetch offsets: %w", err)
	}
	var pks []tracking.PartitionKey
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			pks = append(pks, tracking.PartitionKey{Subscription: s.ID, Topic: o.Topic, Partition: o.Partition})
		}
	})
	states, err := r.states.Load(ctx, pks)
	if err != nil {
		return nil, fmt.Errorf("control: status: %w", err)
	}
	out := &subscription.Status{SubscriptionID: s.ID, Partitions: []subscription.PartitionStatus{}}
	for _, pk := range pks {
		end, _ := ends.Lookup(pk.Topic, pk.Partition)
		ps := subscription.PartitionStatus{
			Topic: pk.Topic, Partition: pk.Partition,
			Committed: -1, LogEnd: end.Offset, Watermark: -1,
			AckedRanges: [][2]int64{},
		}
		if c, ok := commits.Lookup(pk.Topic, pk.Partition); ok && c.Err == nil {
			ps.Committed = c.At
		}
		ps.Lag = ps.LogEnd
		if ps.Committed >= 0 {
			ps.Lag = max(0, ps.LogEnd-ps.Committed)
		}
		if st, ok := states[pk]; ok {
			ps.Owner = st.Owner
			ps.Watermark = st.Watermark
			ps.Pending = st.Pending
			ps.InFlight = st.InFlight
			ps.InFlightKeys = st.Keys
			for _, rg := range st.AckedRanges {
				if rg.End > st.Watermark {
					ps.AckedRanges = append(ps.AckedRanges, [2]int64{max(rg.Start, st.Watermark), rg.End - 1})
				}
			}
			if !st.Oldest.IsZero() {
				t := st.Oldest
				age := max(0, time.Since(t).Milliseconds())
				ps.OldestPending, ps.OldestPendingAgeMS = &t, &age
			}
			if !st.Updated.IsZero() {
				t := st.Updated
				ps.Updated = &t
			}
			for _, r := range st.Ranges {
				ps.Ranges = append(ps.Ranges, subscription.RangeStatus{Lo: r.Lo, Hi: r.Hi, Owner: r.Owner, Watermark: r.Watermark})
			}
			ps.Holding = holdingStatus(st.Holding)
		}
		out.Partitions = append(out.Partitions, ps)
	}
	sort.Slice(out.Partitions, func(i, j int) bool {
		a, b := out.Partitions[i], out.Partitions[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		return a.Partition < b.Partition
	})
	return out, nil
}

// holdingStatus is what the status shows of the record holding a
// partition's watermark.
func holdingStatus(h *tracking.Holding) *subscription.HoldingStatus {
	if h == nil {
		return nil
	}
	out := &subscription.HoldingStatus{Offset: h.Offset, Key: h.Key, Since: h.Since, AgeMS: max(0, time.Since(h.Since).Milliseconds()),
		Attempts: h.Attempts, LastStatus: h.LastStatus, LastError: h.LastError, Behind: h.Behind}
	if !h.Dispatched.IsZero() {
		t := h.Dispatched
		out.Dispatched = &t
	}
	if !h.NextAttempt.IsZero() {
		t := h.NextAttempt
		out.NextAttempt = &t
	}
	if h.Parked > 0 {
		out.Parked = h.Parked
		if !h.OldestParked.IsZero() {
			t := h.OldestParked
			age := max(0, time.Since(t).Milliseconds())
			out.OldestParked, out.OldestParkedAgeMS = &t, &age
		}
	}
	return out
}
