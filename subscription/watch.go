package subscription

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/redis/go-redis/v9"
)

// DefaultResync is the resync interval Watch uses when given 0.
const DefaultResync = time.Second

// fullResyncEvery is how many resyncs pass between two that list the set
// whatever its version says: the safety net for a change made without the
// Store's scripts (30 s at the default interval).
const fullResyncEvery = 30

// Retry pacing while Redis is unreachable: short enough that a restarted
// Redis is noticed quickly, capped so that a long outage costs little.
const (
	watchRetryInitial = 50 * time.Millisecond
	watchRetryMax     = time.Second
)

// Watch calls fn with the full current set of subscriptions (as List
// returns it): once subscribed to the change feed at start, after every
// change announced on it, whenever the feed reconnects, and at least every
// resync interval (DefaultResync when resync is 0). The periodic resync is
// what makes the feed dependable: a lost Pub/Sub message or a Redis
// restart that lost data is healed within one interval. It costs one GET
// of the set's version (keyspace.SubscriptionsVersion), which every change
// the Store makes increments; the set is listed again only when the
// version moved, and every fullResyncEvery resyncs whatever it says, which
// heals a change made behind the store's back. An announced change that
// follows the version Watch holds reads only its own subscription; one
// that skips a version lists the set. A listing decodes only the
// subscriptions whose JSON changed. fn may therefore be called with an
// unchanged set and must treat each call as the whole truth, not as a
// delta; a subscription that did not change is given as the same value
// as in the previous call, so fn must not change the values.
//
// fn is called from Watch's goroutine only, one call at a time; a slow fn
// delays the next call and does not pile calls up. While Redis is
// unreachable Watch logs nothing and retries with a short backoff (at most
// a second apart); fn is not called until a read succeeds again. Watch
// returns nil when ctx ends, after its last fn call has returned.
func (s *Store) Watch(ctx context.Context, resync time.Duration, fn func([]*Subscription)) error {
	if fn == nil {
		return errors.New("subscription: watch: fn is nil")
	}
	if resync <= 0 {
		resync = DefaultResync
	}
	ps := s.rdb.Subscribe(ctx, s.keys.SubscriptionsChanged())
	defer ps.Close()
	// A Pub/Sub read does not watch ctx; closing the connection is what
	// ends a read that is waiting for a message when ctx ends.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()

	retry := backoff.NewExponentialBackOff()
	retry.InitialInterval = watchRetryInitial
	retry.MaxInterval = watchRetryMax
	retry.MaxElapsedTime = 0 // never give up: Watch runs until ctx ends
	retry.Reset()

	// due is when the next resync is owed. It starts as now plus the
	// interval: the first call comes from the subscription confirmation,
	// which arrives at once when Redis is up.
	due := time.Now().Add(resync)
	// The set as last read; fullDue is when the next resync lists it
	// whatever the version says.
	var (
		v       view
		fullDue time.Time
	)
	report := func() {
		fn(v.subs())
		due = time.Now().Add(resync)
	}
	// refresh calls fn with the current set; a resync (force false) lists
	// it only when its version moved or a full resync is due, a
	// (re)subscription always.
	refresh := func(force bool) bool {
		now := time.Now()
		if !force && v.listed && now.Before(fullDue) {
			ver, err := s.version(ctx)
			if err != nil {
				return false
			}
			if ver == v.version {
				report()
				return true
			}
		}
		ver, all, err := s.listVersioned(ctx)
		if err != nil {
			return false
		}
		if err := v.replace(all, ver); err != nil {
			return false
		}
		fullDue = now.Add(fullResyncEvery * resync)
		report()
		return true
	}
	// change calls fn after an announced change: it reads the changed
	// subscription alone when the change is the next version of the
	// view, and lists the set when one was skipped (a message lost) or
	// the announcement carries no version.
	change := func(payload string) bool {
		id, ver, ok := changeOf(payload)
		switch {
		case !ok || !v.listed || ver > v.version+1:
			return refresh(true)
		case ver <= v.version:
			// Listed already: the listing came between the change and its
			// message.
			report()
			return true
		}
		raw, err := s.rdb.HGet(ctx, s.keys.Subscriptions(), id).Result()
		switch {
		case errors.Is(err, redis.Nil):
			v.remove(id)
		case err != nil:
			return false
		default:
			if err := v.put(id, raw); err != nil {
				return false
			}
		}
		v.version = ver
		report()
		return true
	}

	for ctx.Err() == nil {
		// The read waits for a message at most until the next resync is
		// due (never 0, which would mean "no limit").
		msg, err := ps.ReceiveTimeout(ctx, max(time.Until(due), time.Millisecond))
		switch {
		case err == nil:
			var ok bool
			switch m := msg.(type) {
			case *redis.Pong:
				continue
			case *redis.Message:
				ok = change(m.Payload)
			default:
				// A *Subscription confirms a (re)subscription, before
				// which changes may have been missed.
				ok = refresh(true)
			}
			if !ok {
				sleep(ctx, retry.NextBackOff())
				continue
			}
			retry.Reset()
		case isTimeout(err):
			if !refresh(false) {
				sleep(ctx, retry.NextBackOff())
				continue
			}
			retry.Reset()
			// A Pub/Sub connection that died without a word (no RST) would
			// otherwise wait forever; a write fails on it and makes
			// go-redis reconnect and resubscribe.
			_ = ps.Ping(ctx)
		default:
			// The feed is down (Redis unreachable, restarting, or ctx
			// ended and closed it). go-redis reconnects and resubscribes
			// on the next read; keep the resync promise meanwhile.
			if ctx.Err() != nil {
				return nil
			}
			if !time.Now().Before(due) {
				refresh(false)
			}
			sleep(ctx, retry.NextBackOff())
		}
	}
	return nil
}

// version reads the set's version; 0 when no change ever set it.
func (s *Store) version(ctx context.Context) (int64, error) {
	v, err := s.rdb.Get(ctx, s.keys.SubscriptionsVersion()).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("subscription: read the version: %w", err)
	}
	return v, nil
}

// listVersioned reads the set, undecoded, with its version read just
// before it, in one round trip: a change between the two shows as a
// version that moved at the next read, never as a change missed.
func (s *Store) listVersioned(ctx context.Context) (int64, map[string]string, error) {
	var get *redis.StringCmd
	var all *redis.MapStringStringCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, s.keys.SubscriptionsVersion())
		all = p.HGetAll(ctx, s.keys.Subscriptions())
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, nil, fmt.Errorf("subscription: list: %w", err)
	}
	v, err := get.Int64()
	if errors.Is(err, redis.Nil) {
		v, err = 0, nil
	}
	if err != nil {
		return 0, nil, fmt.Errorf("subscription: list: the version: %w", err)
	}
	if err := all.Err(); err != nil {
		return 0, nil, fmt.Errorf("subscription: list: %w", err)
	}
	return v, all.Val(), nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// sleep waits for d or until ctx ends, whichever comes first.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
