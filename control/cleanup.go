package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/keyhook/keyhook/internal/keyspace"
	"github.com/keyhook/keyhook/subscription"
)

// SubscriptionGetter reads a stored subscription; subscription.Store
// implements it. A missing one is an error wrapping
// subscription.ErrNotFound.
type SubscriptionGetter interface {
	Get(ctx context.Context, id string) (*subscription.Subscription, error)
}

// StateDeleter forgets what a deleted subscription left in Redis;
// tracking.Store (its partitions' state) and deadletter.Queue (its queued
// redrives) implement it.
type StateDeleter interface {
	DeleteSubscription(ctx context.Context, subscriptionID string) error
}

// CleanupConfig tunes a Cleaner; zero values mean the defaults.
type CleanupConfig struct {
	// Delay is how long after Schedule a cleanup is first tried: the
	// nodes stop a deleted subscription's consumers within about 2s of
	// the change feed (more while they drain in-flight deliveries, which
	// the Cleaner waits for). Default 3s.
	Delay time.Duration
	// Interval is how often due cleanups are looked for, and how long one
	// that cannot finish yet (its group still has members, Kafka or Redis
	// failed) waits before the next try. Default 1s.
	Interval time.Duration
	// Prefix starts the Redis key of the cleanup queue; default
	// keyspace.DefaultPrefix.
	Prefix string
	// Logger receives failed tries. Default slog.Default().
	Logger *slog.Logger
	// Nodes, when not nil, is asked as well whether any node still owns
	// a partition of the subscription (nodes.Registry): with the shared
	// read its group has no member, and a cursor still draining would
	// write its state back after the cleanup.
	Nodes NodeLister
}

// Cleaner removes what a deleted subscription leaves behind: its consumer
// group, once empty, then its tracking state and queued redrives. The API
// schedules a cleanup before it deletes the subscription; the schedule is
// a Redis sorted set that every API node's Cleaner drains, so a cleanup
// outlives the node that scheduled it and a failed try is retried. A
// cleanup whose subscription still exists when due (the delete was
// refused or failed) is dropped. Tries on two nodes at once are harmless:
// every step is idempotent.
type Cleaner struct {
	rdb   redis.UniversalClient
	key   string
	adm   *kadm.Client
	subs  SubscriptionGetter
	state []StateDeleter
	cfg   CleanupConfig
}

// NewCleaner builds a Cleaner over the Redis holding the schedule, an
// admin client (to delete the group), the subscription store and what
// holds the subscription's state.
func NewCleaner(rdb redis.UniversalClient, adm *kadm.Client, subs SubscriptionGetter, state []StateDeleter, cfg CleanupConfig) (*Cleaner, error) {
	switch {
	case rdb == nil || adm == nil || subs == nil:
		return nil, errors.New("control: NewCleaner: Redis, an admin client and the subscription store are required")
	case cfg.Delay < 0:
		return nil, fmt.Errorf("control: CleanupConfig.Delay must not be negative, got %v", cfg.Delay)
	case cfg.Interval < 0:
		return nil, fmt.Errorf("control: CleanupConfig.Interval must not be negative, got %v", cfg.Interval)
	}
	ks := keyspace.Keyspace{Prefix: cfg.Prefix}
	if err := ks.Validate(); err != nil {
		return nil, fmt.Errorf("control: CleanupConfig.Prefix: %w", err)
	}
	if cfg.Delay == 0 {
		cfg.Delay = 3 * time.Second
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Cleaner{rdb: rdb, key: ks.Cleanups(), adm: adm, subs: subs, state: state, cfg: cfg}, nil
}

// Schedule records that the subscription is about to be deleted; its
// state is removed once it is gone and its consumers stopped.
func (c *Cleaner) Schedule(ctx context.Context, subscriptionID string) error {
	if err := c.retryAt(ctx, subscriptionID, c.cfg.Delay); err != nil {
		return fmt.Errorf("control: schedule cleanup of %s: %w", subscriptionID, err)
	}
	return nil
}

func (c *Cleaner) retryAt(ctx context.Context, id string, after time.Duration) error {
	due := time.Now().Add(after).UnixMilli()
	return c.rdb.ZAdd(ctx, c.key, redis.Z{Score: float64(due), Member: id}).Err()
}

// Run carries out due cleanups every Interval until ctx ends.
func (c *Cleaner) Run(ctx context.Context) error {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			c.runDue(ctx)
		}
	}
}

// runDue tries every cleanup that is due.
func (c *Cleaner) runDue(ctx context.Context) {
	ids, err := c.rdb.ZRangeByScore(ctx, c.key, &redis.ZRangeBy{
		Min: "-inf", Max: strconv.FormatInt(time.Now().UnixMilli(), 10), Count: 16,
	}).Result()
	if err != nil {
		if ctx.Err() == nil {
			c.cfg.Logger.Warn("cannot read due cleanups; will retry", "err", err)
		}
		return
	}
	for _, id := range ids {
		if ctx.Err() != nil {
			return
		}
		if err := c.clean(ctx, id); err != nil {
			c.cfg.Logger.Info("subscription cleanup not finished; will retry", "subscription", id, "err", err, "in", c.cfg.Interval)
			if err := c.retryAt(ctx, id, c.cfg.Interval); err != nil {
				c.cfg.Logger.Warn("cannot reschedule a cleanup", "subscription", id, "err", err)
			}
			continue
		}
		if err := c.rdb.ZRem(ctx, c.key, id).Err(); err != nil {
			c.cfg.Logger.Warn("cannot drop a finished cleanup; it will run again", "subscription", id, "err", err)
		}
	}
}

// errGroupBusy says the subscription's group still has members.
var errGroupBusy = errors.New("its consumer group still has members")

// clean removes one deleted subscription's group and state; an error
// means it is to be tried again.
func (c *Cleaner) clean(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	switch _, err := c.subs.Get(ctx, id); {
	case err == nil:
		c.cfg.Logger.Info("subscription still exists; its cleanup is dropped", "subscription", id)
		return nil
	case !errors.Is(err, subscription.ErrNotFound):
		return fmt.Errorf("read subscription: %w", err)
	}
	if c.cfg.Nodes != nil {
		// A cleanup is first tried Delay after the delete: a node owning
		// a partition of it then has not stopped yet.
		if done, err := stoppedSince(ctx, c.cfg.Nodes, id, time.Now().Add(-c.cfg.Delay)); err != nil {
			return fmt.Errorf("list nodes: %w", err)
		} else if !done {
			return errGroupBusy
		}
	}
	group := (&subscription.Subscription{ID: id}).GroupID()
	resp, err := c.adm.DeleteGroups(ctx, group)
	if err != nil {
		return fmt.Errorf("delete group: %w", err)
	}
	for _, r := range resp {
		switch {
		case r.Err == nil, errors.Is(r.Err, kerr.GroupIDNotFound):
		case errors.Is(r.Err, kerr.NonEmptyGroup):
			// A node still drains: its final flush must land before the
			// state goes, or it would write it back.
			return errGroupBusy
		default:
			return fmt.Errorf("delete group: %w", r.Err)
		}
	}
	for _, s := range c.state {
		if err := s.DeleteSubscription(ctx, id); err != nil {
			return err
		}
	}
	c.cfg.Logger.Info("deleted subscription cleaned up", "subscription", id, "group", group)
	return nil
}
