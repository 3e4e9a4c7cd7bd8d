package webhooks

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// decreaseFactor multiplies an endpoint's concurrency limit when it
// throttles: halving, as TCP does, backs off fast enough to stop a storm
// of 429s within a round trip or two.
const decreaseFactor = 0.5

// LimiterConfig tunes [Limiters]. The zero value is usable.
type LimiterConfig struct {
	// Max caps the concurrent requests to one endpoint origin from this
	// node, whatever the subscriptions pointing at it. 0 means no cap: the
	// limiter only counts until the endpoint first throttles, then limits
	// from there. Default 0.
	Max int
}

// Limiters holds one [Limiter] per endpoint origin (scheme://host:port), so
// that every subscription pointing at one endpoint shares its limit. Create
// one per node and share it; it is safe for concurrent use.
//
// An origin's limiter lives as long as the Limiters: they are as many as
// the distinct endpoint origins this node has delivered to, each a few
// hundred bytes.
type Limiters struct {
	cfg LimiterConfig

	mu       sync.Mutex
	byOrigin map[string]*Limiter
	// byURL remembers the limiter of each endpoint URL, so an attempt
	// does not parse its URL again to find it; cleared when it reaches
	// maxLimiterURLs, as URLs come and go with subscriptions.
	byURL map[string]*Limiter
}

const maxLimiterURLs = 4096

// NewLimiters returns an empty set of limiters configured by cfg.
func NewLimiters(cfg LimiterConfig) (*Limiters, error) {
	if cfg.Max < 0 {
		return nil, errors.New("webhooks: limiter max must not be negative (0 means unlimited)")
	}
	return &Limiters{cfg: cfg, byOrigin: map[string]*Limiter{}, byURL: map[string]*Limiter{}}, nil
}

// For returns the limiter of rawURL's origin, creating it on first use.
// The error wraps [ErrInvalidURL] when rawURL has no http or https origin.
func (ls *Limiters) For(rawURL string) (*Limiter, error) {
	ls.mu.Lock()
	l, ok := ls.byURL[rawURL]
	ls.mu.Unlock()
	if ok {
		return l, nil
	}
	origin, err := Origin(rawURL)
	if err != nil {
		return nil, err
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l, ok = ls.byOrigin[origin]
	if !ok {
		l = newLimiter(origin, ls.cfg.Max)
		ls.byOrigin[origin] = l
	}
	if len(ls.byURL) >= maxLimiterURLs {
		clear(ls.byURL)
	}
	ls.byURL[rawURL] = l
	return l, nil
}

// LimiterStats is a snapshot of one origin's limiter, for metrics.
type LimiterStats struct {
	Origin string
	// Limit is the current concurrency limit, 0 while unlimited.
	Limit int
	// InFlight is how many requests hold a slot.
	InFlight int
	// Waiting is how many requests wait for one.
	Waiting int
}

// Stats returns a snapshot of every limiter, ordered by origin.
func (ls *Limiters) Stats() []LimiterStats {
	ls.mu.Lock()
	all := make([]*Limiter, 0, len(ls.byOrigin))
	for _, l := range ls.byOrigin {
		all = append(all, l)
	}
	ls.mu.Unlock()
	out := make([]LimiterStats, 0, len(all))
	for _, l := range all {
		l.mu.Lock()
		out = append(out, LimiterStats{Origin: l.origin, Limit: l.limitLocked(), InFlight: l.inFlight, Waiting: l.waiters.Len()})
		l.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b LimiterStats) int { return strings.Compare(a.Origin, b.Origin) })
	return out
}

// Origin returns the origin of an http or https URL as
// "scheme://host:port", lowercased, with the scheme's default port filled
// in, so that equivalent spellings of one endpoint share a limiter.
func Origin(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("%w: cannot parse the endpoint URL", ErrInvalidURL)
	}
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	switch {
	case scheme != "http" && scheme != "https":
		return "", fmt.Errorf("%w: scheme must be http or https, not %q", ErrInvalidURL, u.Scheme)
	case u.Hostname() == "":
		return "", fmt.Errorf("%w: missing host", ErrInvalidURL)
	case port == "" && scheme == "http":
		port = "80"
	case port == "":
		port = "443"
	}
	return scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port), nil
}

// Limiter bounds the concurrent requests to one endpoint origin and adapts
// the bound to what the endpoint tolerates (AIMD): a 429 or 503 halves the
// limit (never below 1), and each success while the limit is in use adds
// 1/limit, so that the limit grows by one per limit's worth of successes,
// up to the configured max. Waiters are served in arrival order.
//
// A throttled endpoint answers every request that was already in flight
// with 429 too; to react once per overload rather than once per request,
// only a request acquired since the last decrease can decrease the limit
// again.
type Limiter struct {
	origin string
	max    int // 0: unlimited

	mu       sync.Mutex
	limit    float64 // +Inf while unlimited and never throttled
	inFlight int
	// peak is the most requests in flight when a slot was taken since the
	// last decrease: the concurrency that made the endpoint throttle, and
	// so what the next decrease halves when the limit itself is far above
	// it (a max of 1000 with 10 requests in flight halves to 5, not 500).
	peak  int
	epoch uint64 // counts decreases
	// throttled counts 429/503 answers to requests of the current epoch.
	throttled int
	waiters   list.List
}

// waiter is an Acquire call or a Wait waiting for a slot. granted and
// epoch are set under the limiter's lock before ready is closed, or
// before onGrant is called (Wait's, ready nil) once the lock is let go.
type waiter struct {
	ready   chan struct{}
	onGrant func(Slot)
	granted bool
	epoch   uint64
}

// grantCall is a Wait's slot, to hand over once the limiter's lock is let
// go: onGrant may take its caller's locks, which may be held around a
// call into the limiter.
type grantCall struct {
	fn   func(Slot)
	slot Slot
}

// Slot is a slot of a [Limiter] taken without a goroutine waiting for it
// ([Limiter.TryAcquire], [Limiter.Wait]), for one attempt: the attempt
// gives it back ([Client.AttemptIn]), or [Slot.Release] does when none is
// made. The zero Slot holds nothing.
type Slot struct {
	l     *Limiter
	epoch uint64
}

// Held reports whether s is a slot not given back yet.
func (s *Slot) Held() bool { return s.l != nil }

// Release gives s back, with the status the endpoint answered (0 when no
// request was made or no response came, which leaves the limit alone).
// Later calls, and calls on the zero Slot, do nothing.
func (s *Slot) Release(status int) {
	if l := s.l; l != nil {
		s.l = nil
		l.release(s.epoch, status)
	}
}

func newLimiter(origin string, max int) *Limiter {
	l := &Limiter{origin: origin, max: max, limit: math.Inf(1)}
	if max > 0 {
		l.limit = float64(max)
	}
	return l
}

// Origin returns the origin this limiter guards.
func (l *Limiter) Origin() string { return l.origin }

// Limit returns the current concurrency limit, 0 while unlimited.
func (l *Limiter) Limit() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limitLocked()
}

func (l *Limiter) limitLocked() int {
	if math.IsInf(l.limit, 1) {
		return 0
	}
	return int(l.limit)
}

// InFlight returns how many requests hold a slot.
func (l *Limiter) InFlight() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inFlight
}

// Waiting returns how many Acquire calls wait for a slot.
func (l *Limiter) Waiting() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.waiters.Len()
}

// Acquire waits for a slot, or until ctx ends (the error then wraps the
// context's cause). The caller must call release exactly once, with the
// status the endpoint answered (0 when no response arrived, which leaves
// the limit alone); later calls do nothing.
func (l *Limiter) Acquire(ctx context.Context) (release func(status int), err error) {
	epoch, err := l.acquire(ctx)
	if err != nil {
		return nil, err
	}
	return l.releaser(epoch), nil
}

// acquire is Acquire returning the epoch the slot was taken in, which the
// caller hands to release exactly once: the client's own attempts release
// their slot without a function made for each.
func (l *Limiter) acquire(ctx context.Context) (epoch uint64, err error) {
	l.mu.Lock()
	if l.takeFree() {
		epoch := l.epoch
		l.mu.Unlock()
		return epoch, nil
	}
	if ctx.Err() != nil {
		l.mu.Unlock()
		return 0, fmt.Errorf("webhooks: wait for a slot at %s: %w", l.origin, context.Cause(ctx))
	}
	w := &waiter{ready: make(chan struct{})}
	elem := l.waiters.PushBack(w)
	l.mu.Unlock()

	select {
	case <-w.ready:
		return w.epoch, nil
	case <-ctx.Done():
		l.mu.Lock()
		var calls []grantCall
		if w.granted {
			// The slot came as the context ended: hand it on.
			l.inFlight--
			calls = l.grant(nil)
		} else {
			l.waiters.Remove(elem)
		}
		l.mu.Unlock()
		callGrants(calls)
		return 0, fmt.Errorf("webhooks: wait for a slot at %s: %w", l.origin, context.Cause(ctx))
	}
}

func (l *Limiter) hasRoom() bool {
	return math.IsInf(l.limit, 1) || l.inFlight < int(l.limit)
}

func (l *Limiter) take() {
	l.inFlight++
	l.peak = max(l.peak, l.inFlight)
}

// takeFree takes a slot when one is free and nobody waits for one (who
// would be owed it first). Under mu.
func (l *Limiter) takeFree() bool {
	if l.waiters.Len() == 0 && l.hasRoom() {
		l.take()
		return true
	}
	return false
}

// grant hands free slots to waiters, oldest first: an Acquire's at once,
// a Wait's appended to calls, for the caller to make with callGrants once
// it let go of the lock.
func (l *Limiter) grant(calls []grantCall) []grantCall {
	for l.waiters.Len() > 0 && l.hasRoom() {
		w := l.waiters.Remove(l.waiters.Front()).(*waiter)
		l.take()
		w.granted, w.epoch = true, l.epoch
		if w.onGrant != nil {
			calls = append(calls, grantCall{fn: w.onGrant, slot: Slot{l: l, epoch: l.epoch}})
			continue
		}
		close(w.ready)
	}
	return calls
}

func callGrants(calls []grantCall) {
	for _, c := range calls {
		c.fn(c.slot)
	}
}

// TryAcquire takes a slot when one is free and nobody waits for one.
func (l *Limiter) TryAcquire() (Slot, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.takeFree() {
		return Slot{l: l, epoch: l.epoch}, true
	}
	return Slot{}, false
}

// Wait queues for a slot without a goroutine: onGrant is called with it
// once, in arrival order with Acquire's waiters, on the goroutine that
// freed it and holding none of the limiter's locks; at once, before Wait
// returns, when a slot is free and nobody waits. Its caller then owns the
// slot and must give it back. cancel withdraws the wait and reports
// whether it did: false means onGrant has been or will be called.
//
// A caller with many deliveries waiting on one endpoint (a delivery pool)
// pays for each the waiter, not a parked goroutine and its stack.
func (l *Limiter) Wait(onGrant func(Slot)) (cancel func() bool) {
	l.mu.Lock()
	if l.takeFree() {
		s := Slot{l: l, epoch: l.epoch}
		l.mu.Unlock()
		onGrant(s)
		return func() bool { return false }
	}
	w := &waiter{onGrant: onGrant}
	elem := l.waiters.PushBack(w)
	l.mu.Unlock()
	return func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		if w.granted {
			return false
		}
		l.waiters.Remove(elem) // a no-op when withdrawn before
		return true
	}
}

func (l *Limiter) releaser(epoch uint64) func(int) {
	var done atomic.Bool
	return func(status int) {
		if done.Swap(true) {
			return
		}
		l.release(epoch, status)
	}
}

func (l *Limiter) release(epoch uint64, status int) {
	var buf [2]grantCall
	l.mu.Lock()
	switch {
	case status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable:
		// One throttled request is not overload: a single record that an
		// endpoint answers 503 again and again must not starve every other
		// key. A decrease takes throttles from two requests of one epoch.
		if epoch == l.epoch {
			l.throttled++
		}
		if epoch == l.epoch && l.throttled >= 2 {
			l.throttled = 0
			l.limit = max(1, min(l.limit, float64(l.peak))*decreaseFactor)
			l.epoch++
			// Requests still in flight from before were sent under the
			// old limit; the next decrease must judge the new one.
			l.peak = 0
		}
	case status >= 200 && status <= 299:
		// Grow only while the limit is in use: successes far below it say
		// nothing about what the endpoint would take above it.
		if !math.IsInf(l.limit, 1) && float64(l.inFlight)*2 >= l.limit {
			l.limit += 1 / l.limit
			if l.max > 0 {
				l.limit = min(l.limit, float64(l.max))
			}
		}
	}
	l.inFlight--
	calls := l.grant(buf[:0])
	l.mu.Unlock()
	callGrants(calls)
}

// sendFunc makes attempt n of r. It fails, making no attempt, only when
// ctx ends first.
type sendFunc func(ctx context.Context, r *Request, n int) (Attempt, error)

// sendOnce is [Client.Send] as a sendFunc.
func (c *Client) sendOnce(ctx context.Context, r *Request, n int) (Attempt, error) {
	return c.Send(ctx, r, n), nil
}

// limit wraps send in a slot of the endpoint's limiter, when there are
// limiters, and reports each attempt's status to it. The wait for a slot
// is part of the delivery (it counts toward its MaxElapsed) but not of the
// attempt.
func limit(ls *Limiters, send sendFunc) sendFunc {
	if ls == nil {
		return send
	}
	return func(ctx context.Context, r *Request, n int) (Attempt, error) {
		lim, err := ls.For(r.URL)
		if err != nil {
			// An unusable URL: Send reports it as a final attempt.
			return send(ctx, r, n)
		}
		epoch, err := lim.acquire(ctx)
		if err != nil {
			return Attempt{}, err
		}
		a, err := send(ctx, r, n)
		lim.release(epoch, limitStatus(a.Status, n))
		return a, err
	}
}

// limitStatus is what attempt n answered status tells its limiter: a
// retry answered 429 or 503 says nothing new about the endpoint's load,
// so only first attempts may lower the limit.
func limitStatus(status, n int) int {
	if n > 1 && (status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable) {
		return 0
	}
	return status
}
