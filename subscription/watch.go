package subscription

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/redis/go-redis/v9"
)

// DefaultResync is the resync interval Watch uses when given 0.
const DefaultResync = time.Second

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
// what makes the feed dependable: a lost Pub/Sub message, a change made
// behind the store's back, or a Redis restart that lost data is healed
// within one interval. fn may therefore be called with an unchanged set and
// must treat each call as the whole truth, not as a delta.
//
// fn is called from Watch's goroutine only, one call at a time; a slow fn
// delays the next call and does not pile calls up. While Redis is
// unreachable Watch logs nothing and retries with a short backoff (at most
// a second apart); fn is not called until a list succeeds again. Watch
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
	refresh := func() bool {
		subs, err := s.List(ctx)
		if err != nil {
			return false
		}
		fn(subs)
		due = time.Now().Add(resync)
		return true
	}

	for ctx.Err() == nil {
		// The read waits for a message at most until the next resync is
		// due (never 0, which would mean "no limit").
		msg, err := ps.ReceiveTimeout(ctx, max(time.Until(due), time.Millisecond))
		switch {
		case err == nil:
			if _, ok := msg.(*redis.Pong); ok {
				continue
			}
			// A *Message is a change; a *Subscription confirms a
			// (re)subscription, before which changes may have been missed.
			if !refresh() {
				sleep(ctx, retry.NextBackOff())
				continue
			}
			retry.Reset()
		case isTimeout(err):
			if !refresh() {
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
				refresh()
			}
			sleep(ctx, retry.NextBackOff())
		}
	}
	return nil
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
