package dispatcher

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/keyhook/keyhook/subscription"
)

// RateTokens hands out the tokens of subscriptions' rate limits, shared
// by every node; ratelimit.Tokens implements it on Redis. Take grants up
// to want tokens of the subscription's limit (none when the limit is
// spent) and, when it grants fewer, how long until the next one.
type RateTokens interface {
	Take(ctx context.Context, subscription string, limit subscription.RateLimit, want int) (granted int, next time.Duration, err error)
}

// fallbackFor is how long a rate gate that could not reach its tokens
// limits on its own before it asks again.
const fallbackFor = time.Second

// rateGate holds a rate-limited subscription's attempts on this node
// until a token of its limit is theirs. A task without a token queues,
// holding no delivery slot; one goroutine (pump) takes tokens for the
// queue, a few at a time, and hands them out oldest first, so keys take
// turns in the order they became ready and a key that just went queues
// behind the others. A task's record stays its lane's head while it
// waits: nothing of its key overtakes it.
//
// When the tokens cannot be had (Redis down), the gate limits alone, to
// this node's share of the rate (its partitions of the subscription's),
// for fallbackFor at a time, and counts the failure (keyhook_errors,
// operation rate_limit): deliveries neither stop nor run unlimited.
type rateGate struct {
	p      *pool
	limit  subscription.RateLimit
	tokens RateTokens

	// mu guards every field below.
	mu sync.Mutex
	// queue are the tasks waiting for a token, oldest first, with when
	// they started to wait.
	queue []queued
	// admitted are the tasks a token was taken for, until they run.
	admitted map[task]struct{}
	// started is set once the pump runs; stop ends it. closed is set by
	// close: no pump starts after, and what comes stops.
	started, closed bool
	stop            context.CancelFunc
	kick            chan struct{}
	// localUntil is until when the pump limits alone, the shared tokens
	// having failed; local is that limit. The pump's own.
	localUntil time.Time
	local      *rate.Limiter
}

type queued struct {
	t     task
	since time.Time
}

func newRateGate(p *pool, limit subscription.RateLimit, tokens RateTokens) *rateGate {
	return &rateGate{p: p, limit: limit, tokens: tokens, admitted: make(map[task]struct{}), kick: make(chan struct{}, 1)}
}

// admit reports whether t holds a token (spending it), else queues t,
// which the gate runs again once a token is its; a task of a worker that
// stopped retrying stops instead.
func (r *rateGate) admit(t task) bool {
	r.mu.Lock()
	if _, ok := r.admitted[t]; ok {
		delete(r.admitted, t)
		r.mu.Unlock()
		return true
	}
	if t.owner().noRetries.Load() || r.closed {
		r.mu.Unlock()
		t.stop()
		return false
	}
	r.queue = append(r.queue, queued{t: t, since: time.Now()})
	r.p.g.retrying.Add(t.size())
	if !r.started {
		r.start()
	}
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
	return false
}

// start runs the pump in the pool, until close. Under mu.
func (r *rateGate) start() {
	ctx, cancel := context.WithCancel(context.Background())
	r.started, r.stop = true, cancel
	r.p.running.Add(1)
	go func() {
		defer r.p.running.Done()
		r.pump(ctx)
	}()
}

// close stops the pump, which the pool waits for, and the tasks still
// queued, as the pool stops those whose timer fires after it closed.
func (r *rateGate) close() {
	r.mu.Lock()
	r.closed = true
	if r.stop != nil {
		r.stop()
	}
	queued := r.queue
	r.queue = nil
	for _, q := range queued {
		r.p.g.retrying.Add(-q.t.size())
	}
	r.mu.Unlock()
	for _, q := range queued {
		q.t.stop()
	}
}

// pump takes tokens while tasks wait.
func (r *rateGate) pump(ctx context.Context) {
	burst := r.limit.BurstOrDefault()
	for {
		r.mu.Lock()
		want := min(len(r.queue), burst)
		r.mu.Unlock()
		if want == 0 {
			select {
			case <-ctx.Done():
				return
			case <-r.kick:
				continue
			}
		}
		granted, next := r.take(ctx, want)
		r.grant(granted)
		if granted < want && next > 0 {
			t := time.NewTimer(next)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}

// take takes up to want tokens from the shared limit, or from the
// node's share while the shared one fails.
func (r *rateGate) take(ctx context.Context, want int) (int, time.Duration) {
	if time.Now().After(r.localUntil) {
		tctx, cancel := context.WithTimeout(ctx, time.Second)
		granted, next, err := r.tokens.Take(tctx, r.p.g.sub.ID, r.limit, want)
		cancel()
		if err == nil {
			if !r.localUntil.IsZero() {
				r.localUntil = time.Time{}
				r.p.g.log.Info("rate limit tokens available again; the limit is shared by every node")
			}
			return granted, next
		}
		if ctx.Err() != nil {
			return 0, 0
		}
		r.p.g.countError("rate_limit")
		share := r.share()
		if r.local == nil || r.local.Limit() != rate.Limit(share) {
			r.local = rate.NewLimiter(rate.Limit(share), max(1, int(float64(r.limit.BurstOrDefault())*share/float64(r.limit.PerSecond))))
		}
		if r.localUntil.IsZero() {
			// Once per outage, not per retry.
			r.p.g.log.Warn("rate limit tokens unavailable; limiting to this node's share of the rate", "err", err, "per_second", share)
		}
		r.localUntil = time.Now().Add(fallbackFor)
	}
	res := r.local.Reserve()
	if d := res.Delay(); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, 0
		case <-t.C:
		}
	}
	return 1, 0
}

// share is this node's part of the rate while the shared limit fails:
// the rate times the node's part of the subscription's partitions, at
// least one a minute.
func (r *rateGate) share() float64 {
	g := r.p.g
	g.mu.Lock()
	owned := len(g.workers)
	g.mu.Unlock()
	total := g.topicPartitions.Load()
	f := 1.0
	if total > 0 && int64(owned) < total {
		f = float64(owned) / float64(total)
	}
	return max(float64(r.limit.PerSecond)*f, 1.0/60)
}

// grant hands n tokens to the oldest waiting tasks and runs them.
func (r *rateGate) grant(n int) {
	if n <= 0 {
		return
	}
	r.mu.Lock()
	n = min(n, len(r.queue))
	ts := make([]queued, n)
	copy(ts, r.queue)
	clear(r.queue[:n])
	r.queue = r.queue[n:]
	for _, q := range ts {
		r.admitted[q.t] = struct{}{}
		r.p.g.retrying.Add(-q.t.size())
	}
	r.mu.Unlock()
	for _, q := range ts {
		q.t.hold(time.Since(q.since))
		r.p.resume(q.t)
	}
}

// drop takes w's tasks out of the gate, for stopRetries.
func (r *rateGate) drop(w *worker) []task {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []task
	kept := r.queue[:0]
	for _, q := range r.queue {
		if q.t.owner() == w {
			out = append(out, q.t)
			r.p.g.retrying.Add(-q.t.size())
			continue
		}
		kept = append(kept, q)
	}
	clear(r.queue[len(kept):])
	r.queue = kept
	for t := range r.admitted {
		if t.owner() == w {
			delete(r.admitted, t)
		}
	}
	return out
}

// localTokens is the rate limits of a node alone, for a node given no
// RateTokens: each subscription's whole rate is this node's.
type localTokens struct {
	// mu guards byID.
	mu   sync.Mutex
	byID map[string]*rate.Limiter
}

func newLocalTokens() *localTokens { return &localTokens{byID: make(map[string]*rate.Limiter)} }

func (l *localTokens) Take(_ context.Context, id string, limit subscription.RateLimit, want int) (int, time.Duration, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim, ok := l.byID[id]
	if !ok || lim.Limit() != rate.Limit(limit.PerSecond) || lim.Burst() != limit.BurstOrDefault() {
		lim = rate.NewLimiter(rate.Limit(limit.PerSecond), limit.BurstOrDefault())
		l.byID[id] = lim
	}
	now := time.Now()
	n := min(want, int(lim.TokensAt(now)))
	if n > 0 && lim.AllowN(now, n) {
		return n, 0, nil
	}
	missing := 1 - lim.TokensAt(now)
	return 0, max(time.Duration(missing/float64(limit.PerSecond)*float64(time.Second)), time.Millisecond), nil
}
