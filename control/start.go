package control

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/keyhook/keyhook/subscription"
)

// StartResolver fixes where a new subscription starts reading, once, when
// it is created.
//
// A start of "latest" means "the records produced after the subscription
// was created". Left to the consumer's reset policy it would mean "the log
// end whenever a partition happens to have no commit": after a node joins,
// records arrive and it leaves before committing, the next node would
// reset to the end again and skip them; partitions added to the topic
// later would skip their first records. Committing the log ends for the
// subscription's group before it exists gives every partition a commit
// from the start, so the consumers always reset to the earliest offset,
// which is right for everything that has no commit yet: partitions added
// later, and topics created after the subscription.
type StartResolver struct {
	adm *kadm.Client
}

// NewStartResolver builds a StartResolver over an admin client, which the
// caller keeps ownership of.
func NewStartResolver(adm *kadm.Client) (*StartResolver, error) {
	if adm == nil {
		return nil, errors.New("control: new start resolver: nil admin client")
	}
	return &StartResolver{adm: adm}, nil
}

// ResolveStart commits, for the consumer group of sub (whose ID must be
// assigned), the offsets its start names: for "latest", the log end of
// every partition of its topics; for "earliest", nothing (a partition
// without a commit starts at the oldest record). Call it before the
// subscription is stored, so no node can consume the group before its
// commits exist. A topic that does not exist yet has no partitions to
// commit: its records will all be newer than the subscription. Any other
// error means Kafka could not answer; nothing should be stored then.
func (r *StartResolver) ResolveStart(ctx context.Context, sub *subscription.Subscription) error {
	if sub.ID == "" {
		return errors.New("control: resolve start: subscription has no id")
	}
	if sub.Start != subscription.StartLatest {
		return nil
	}
	ends, err := r.adm.ListEndOffsets(ctx, sub.Topics...)
	if err != nil {
		return fmt.Errorf("control: resolve start: list end offsets: %w", err)
	}
	offs := make(kadm.Offsets)
	var firstErr error
	ends.Each(func(o kadm.ListedOffset) {
		switch {
		case o.Err == nil:
			offs.Add(kadm.Offset{Topic: o.Topic, Partition: o.Partition, At: o.Offset, LeaderEpoch: -1})
		case errors.Is(o.Err, kerr.UnknownTopicOrPartition):
		case firstErr == nil:
			firstErr = fmt.Errorf("%s/%d: %w", o.Topic, o.Partition, o.Err)
		}
	})
	if firstErr != nil {
		return fmt.Errorf("control: resolve start: list end offsets: %w", firstErr)
	}
	if len(offs) == 0 {
		return nil
	}
	resp, err := r.adm.CommitOffsets(ctx, sub.GroupID(), offs)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return fmt.Errorf("control: resolve start: commit for group %s: %w", sub.GroupID(), err)
	}
	return nil
}
