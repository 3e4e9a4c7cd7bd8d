package control

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
)

// SubscriptionUpdater changes a stored subscription atomically;
// subscription.Store implements it.
type SubscriptionUpdater interface {
	Update(ctx context.Context, id string, expectedVersion int64, fn func(*subscription.Subscription) error) (*subscription.Subscription, error)
}

// TrackingResetter forgets the tracking state of partitions;
// tracking.Store implements it.
type TrackingResetter interface {
	DeletePartitions(ctx context.Context, pks []tracking.PartitionKey) error
}

// SeekConfig tunes a Seeker; zero values mean the defaults.
type SeekConfig struct {
	// StopTimeout bounds how long a seek waits for every node to leave the
	// subscription's group (drain, flush, commit). Default 60s.
	StopTimeout time.Duration
	// PollInterval is how often a seek asks whether the group is empty.
	// Default 200ms.
	PollInterval time.Duration
	// Nodes, when not nil, is asked as well whether any node still owns
	// a partition of the subscription (nodes.Registry): with the shared
	// read the subscription's group has no member to wait for.
	Nodes NodeLister
}

// Seeker moves a subscription's consumer group.
type Seeker struct {
	adm     *kadm.Client
	subs    SubscriptionUpdater
	tracker TrackingResetter
	cfg     SeekConfig
}

// NewSeeker builds a Seeker over an admin client, the subscription store
// (to pause and resume) and the tracker (to forget acked ranges).
func NewSeeker(adm *kadm.Client, subs SubscriptionUpdater, tracker TrackingResetter, cfg SeekConfig) (*Seeker, error) {
	if cfg.StopTimeout < 0 {
		return nil, fmt.Errorf("control: SeekConfig.StopTimeout must not be negative, got %v", cfg.StopTimeout)
	}
	if cfg.PollInterval < 0 {
		return nil, fmt.Errorf("control: SeekConfig.PollInterval must not be negative, got %v", cfg.PollInterval)
	}
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = time.Minute
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 200 * time.Millisecond
	}
	return &Seeker{adm: adm, subs: subs, tracker: tracker, cfg: cfg}, nil
}

// Seek moves the subscription's consumer group. It is applied safely: the
// subscription is paused so every node drains its in-flight deliveries,
// commits and leaves the group; once the group is empty the commits are
// rewritten and the tracking state (acked ranges) is dropped, so records
// after the new position are delivered again; then the subscription's
// paused state is restored and nodes resume from the new commits.
func (sk *Seeker) Seek(ctx context.Context, sub *subscription.Subscription, req subscription.SeekRequest) (*subscription.SeekResult, error) {
	if errs := req.Validate(sub); len(errs) > 0 {
		return nil, &subscription.ValidationError{Errors: errs}
	}
	targets, err := sk.seekTargets(ctx, sub, req)
	if err != nil {
		return nil, err
	}
	wasPaused := false
	if _, err := sk.subs.Update(ctx, sub.ID, subscription.AnyVersion, func(s *subscription.Subscription) error {
		wasPaused = s.Paused
		s.Paused = true
		return nil
	}); err != nil {
		return nil, fmt.Errorf("control: seek: pause: %w", err)
	}
	restore := func() error {
		// Restoring must happen even when the caller has gone away.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_, err := sk.subs.Update(rctx, sub.ID, subscription.AnyVersion, func(s *subscription.Subscription) error {
			s.Paused = wasPaused
			return nil
		})
		return err
	}
	res, err := sk.rewrite(ctx, sub, targets)
	if rerr := restore(); rerr != nil {
		err = errors.Join(err, fmt.Errorf("control: seek: resume: %w", rerr))
	}
	return res, err
}

func (sk *Seeker) rewrite(ctx context.Context, sub *subscription.Subscription, targets kadm.Offsets) (*subscription.SeekResult, error) {
	if err := sk.waitGroupEmpty(ctx, sub); err != nil {
		return nil, err
	}
	before, err := kafkaCall(ctx, func(ctx context.Context) (kadm.OffsetResponses, error) {
		return sk.adm.FetchOffsets(ctx, sub.GroupID())
	})
	// No node has consumed yet: no group, nothing committed.
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return nil, fmt.Errorf("control: seek: read commits: %w", err)
	}
	resp, err := kafkaCall(ctx, func(ctx context.Context) (kadm.OffsetResponses, error) {
		return sk.adm.CommitOffsets(ctx, sub.GroupID(), targets)
	})
	if err != nil {
		return nil, fmt.Errorf("control: seek: commit: %w", err)
	}
	if err := resp.Error(); err != nil {
		return nil, fmt.Errorf("control: seek: commit: %w", err)
	}
	// Only the sought partitions forget what was acked: the others resume
	// at their commit and must still skip what they acked above it.
	var sought []tracking.PartitionKey
	targets.Each(func(o kadm.Offset) {
		sought = append(sought, tracking.PartitionKey{Subscription: sub.ID, Topic: o.Topic, Partition: o.Partition})
	})
	if err := sk.tracker.DeletePartitions(ctx, sought); err != nil {
		return nil, fmt.Errorf("control: seek: reset tracking: %w", err)
	}
	out := &subscription.SeekResult{SubscriptionID: sub.ID, Partitions: []subscription.SeekedPartition{}}
	targets.Each(func(o kadm.Offset) {
		prev := int64(-1)
		if b, ok := before.Lookup(o.Topic, o.Partition); ok && b.Err == nil {
			prev = b.At
		}
		out.Partitions = append(out.Partitions, subscription.SeekedPartition{Topic: o.Topic, Partition: o.Partition, Previous: prev, Offset: o.At})
	})
	sort.Slice(out.Partitions, func(i, j int) bool {
		x, y := out.Partitions[i], out.Partitions[j]
		if x.Topic != y.Topic {
			return x.Topic < y.Topic
		}
		return x.Partition < y.Partition
	})
	return out, nil
}

// seekTargets resolves the request to one offset per partition, clamped to
// what each partition retains.
func (sk *Seeker) seekTargets(ctx context.Context, sub *subscription.Subscription, req subscription.SeekRequest) (kadm.Offsets, error) {
	starts, err := kafkaCall(ctx, func(ctx context.Context) (kadm.ListedOffsets, error) {
		return sk.adm.ListStartOffsets(ctx, sub.Topics...)
	})
	if err != nil {
		return nil, fmt.Errorf("control: seek: list start offsets: %w", err)
	}
	ends, err := kafkaCall(ctx, func(ctx context.Context) (kadm.ListedOffsets, error) {
		return sk.adm.ListEndOffsets(ctx, sub.Topics...)
	})
	if err != nil {
		return nil, fmt.Errorf("control: seek: list end offsets: %w", err)
	}
	if err := errorBesidesUnknownTopics(ends); err != nil {
		return nil, fmt.Errorf("control: seek: list end offsets: %w", err)
	}
	var at kadm.ListedOffsets
	switch req.To {
	case subscription.SeekEarliest:
		at = starts
	case subscription.SeekLatest:
		at = ends
	case subscription.SeekTimestamp:
		if at, err = sk.adm.ListOffsetsAfterMilli(ctx, req.Timestamp.UnixMilli(), sub.Topics...); err != nil {
			return nil, fmt.Errorf("control: seek: list offsets after %s: %w", req.Timestamp, err)
		}
	}
	targets := make(kadm.Offsets)
	clamp := func(topic string, p int32, o int64) int64 {
		if s, ok := starts.Lookup(topic, p); ok && o < s.Offset {
			o = s.Offset
		}
		if e, ok := ends.Lookup(topic, p); ok && (o > e.Offset || o < 0) {
			o = e.Offset // ListOffsetsAfterMilli answers -1 past the end
		}
		return o
	}
	if req.To == subscription.SeekOffsets {
		var errs []subscription.FieldError
		for i, o := range req.Offsets {
			if _, ok := ends.Lookup(o.Topic, o.Partition); !ok {
				errs = append(errs, subscription.FieldError{Field: "offsets[" + strconv.Itoa(i) + "].partition", Message: fmt.Sprintf("topic %q has no partition %d", o.Topic, o.Partition)})
				continue
			}
			targets.AddOffset(o.Topic, o.Partition, clamp(o.Topic, o.Partition, o.Offset), -1)
		}
		if len(errs) > 0 {
			return nil, &subscription.ValidationError{Errors: errs}
		}
		return targets, nil
	}
	at.Each(func(l kadm.ListedOffset) {
		if l.Err == nil {
			targets.AddOffset(l.Topic, l.Partition, clamp(l.Topic, l.Partition, l.Offset), -1)
		}
	})
	return targets, nil
}

// errorBesidesUnknownTopics is the first error of l other than a topic that
// does not exist: such a topic (not created yet, or deleted) has nothing to
// move, and the subscription's other topics still seek.
func errorBesidesUnknownTopics(l kadm.ListedOffsets) error {
	var first error
	l.Each(func(o kadm.ListedOffset) {
		if first == nil && o.Err != nil && !errors.Is(o.Err, kerr.UnknownTopicOrPartition) {
			first = o.Err
		}
	})
	return first
}

// waitGroupEmpty waits until no member is left in the subscription's
// group and, with Nodes, until every node said it owns none of its
// partitions.
func (sk *Seeker) waitGroupEmpty(ctx context.Context, sub *subscription.Subscription) error {
	group := sub.GroupID()
	ctx, cancel := context.WithTimeout(ctx, sk.cfg.StopTimeout)
	defer cancel()
	since := time.Now()
	for {
		described, err := sk.adm.DescribeGroups(ctx, group)
		if err == nil {
			if g, ok := described[group]; ok && (g.Err == nil && len(g.Members) == 0 || errors.Is(g.Err, kerr.GroupIDNotFound)) {
				if sk.cfg.Nodes == nil {
					return nil
				}
				if done, err := stoppedSince(ctx, sk.cfg.Nodes, sub.ID, since); err == nil && done {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("control: seek: consumers of group %s did not stop within %v: %w", group, sk.cfg.StopTimeout, ctx.Err())
		case <-time.After(sk.cfg.PollInterval):
		}
	}
}
