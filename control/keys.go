package control

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
)

// PartitionLister names the partitions of topics.
type PartitionLister interface {
	Partitions(ctx context.Context, topics []string) ([]tracking.PartitionKey, error)
}

// KeyReader lists a subscription's keys whose records do not flow, from
// the lists the partitions' owners flush with their state (see
// tracking.StalledKeys): any API node answers for every partition, as
// of its owner's last flush.
type KeyReader struct {
	parts  PartitionLister
	states StateLoader
	now    func() time.Time
}

// NewKeyReader builds a reader over an admin client, which names the
// partitions, and the tracker.
func NewKeyReader(adm *kadm.Client, states StateLoader) *KeyReader {
	return NewKeyReaderOver(kadmPartitions{adm}, states)
}

// NewKeyReaderOver builds a reader over any partition lister.
func NewKeyReaderOver(parts PartitionLister, states StateLoader) *KeyReader {
	return &KeyReader{parts: parts, states: states, now: time.Now}
}

// Keys lists the subscription's keys not flowing that q keeps, in topic,
// partition and offset order.
func (r *KeyReader) Keys(ctx context.Context, s *subscription.Subscription, q subscription.KeysQuery) (*subscription.KeyList, error) {
	topics := s.Topics
	if q.Topic != "" {
		if !slices.Contains(topics, q.Topic) {
			return &subscription.KeyList{SubscriptionID: s.ID, Keys: []subscription.StalledKey{}}, nil
		}
		topics = []string{q.Topic}
	}
	all, err := r.parts.Partitions(ctx, topics)
	if err != nil {
		return nil, fmt.Errorf("control: keys: %w", err)
	}
	var pks []tracking.PartitionKey
	for _, pk := range all {
		if q.Partition == nil || pk.Partition == *q.Partition {
			pk.Subscription = s.ID
			pks = append(pks, pk)
		}
	}
	sort.Slice(pks, func(i, j int) bool {
		if pks[i].Topic != pks[j].Topic {
			return pks[i].Topic < pks[j].Topic
		}
		return pks[i].Partition < pks[j].Partition
	})
	states, err := r.states.Load(ctx, pks)
	if err != nil {
		return nil, fmt.Errorf("control: keys: %w", err)
	}
	limit := q.Limit
	if limit <= 0 {
		limit = subscription.DefaultKeysLimit
	}
	out := &subscription.KeyList{SubscriptionID: s.ID, Keys: []subscription.StalledKey{}}
	now := r.now()
	for _, pk := range pks {
		st := states[pk]
		if st.StalledTotal > len(st.Stalled) {
			// The owner counted keys it did not store, of any state.
			out.Truncated = true
		}
		for _, k := range st.Stalled {
			state := subscription.KeyState(k.State)
			if len(q.States) > 0 && !slices.Contains(q.States, state) {
				continue
			}
			if len(out.Keys) == limit {
				out.Truncated = true
				return out, nil
			}
			out.Keys = append(out.Keys, stalledKey(pk, k, state, now))
		}
	}
	return out, nil
}

// stalledKey is what a listing shows of a stored key.
func stalledKey(pk tracking.PartitionKey, k tracking.OwnedStalledKey, state subscription.KeyState, now time.Time) subscription.StalledKey {
	out := subscription.StalledKey{Topic: pk.Topic, Partition: pk.Partition, Owner: k.Owner,
		Key: k.Key, KeyBase64: k.KeyBase64, KeyTruncated: k.KeyTruncated, Offset: k.Offset, State: state,
		Since: k.Since, AgeMS: max(0, now.Sub(k.Since).Milliseconds()),
		Attempts: k.Attempts, LastStatus: k.LastStatus, LastError: k.LastError, Behind: max(0, k.Behind), Parked: k.Parked}
	if !k.Dispatched.IsZero() {
		t := k.Dispatched
		out.Dispatched = &t
	}
	if !k.NextAttempt.IsZero() {
		t := k.NextAttempt
		out.NextAttempt = &t
	}
	return out
}

// kadmPartitions names partitions from the topics' metadata.
type kadmPartitions struct{ adm *kadm.Client }

func (k kadmPartitions) Partitions(ctx context.Context, topics []string) ([]tracking.PartitionKey, error) {
	ends, err := kafkaCall(ctx, func(ctx context.Context) (kadm.ListedOffsets, error) { return k.adm.ListEndOffsets(ctx, topics...) })
	if err != nil {
		return nil, fmt.Errorf("list end offsets: %w", err)
	}
	var out []tracking.PartitionKey
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			out = append(out, tracking.PartitionKey{Topic: o.Topic, Partition: o.Partition})
		}
	})
	return out, nil
}
