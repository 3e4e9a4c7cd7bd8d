package breaker

import (
	"errors"
	"sync"
	"time"
)

// Defaults of Config.
const (
	// DefaultInterval is how long an open breaker waits before its probe:
	// long enough that a down endpoint sees one request where a thousand
	// keys retrying would send hundreds, short enough that a recovered one
	// is back at full rate within seconds (recovery takes at most one
	// interval and the probe's round trip).
	DefaultInterval = 10 * time.Second
)

// Transition is a breaker changing state, for logs, metrics and
// operational events.
type Transition struct {
	// Origin is the endpoint origin, scheme://host:port.
	Origin   string
	From, To State
	// Reason says why: "5 consecutive failures, the last: 503", "interval
	// passed", "probe succeeded", "probe failed: …".
	Reason string
	At     time.Time
}

// Config tunes the breakers of a Set.
type Config struct {
	// Failures is how many consecutive failures open a breaker; 0 turns
	// breakers off (For returns nil).
	Failures int
	// Interval is how long a breaker stays open before its probe.
	// Default DefaultInterval.
	Interval time.Duration
	// OnTransition, when not nil, is called at every transition, in
	// order, under the breaker's lock: it must not block nor call the
	// breaker. Logs, metrics and an events emitter attach here.
	OnTransition func(Transition)
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Validate reports the first wrong field, by name.
func (c Config) Validate() error {
	switch {
	case c.Failures < 0:
		return errors.New("Failures must be 0 (off) or more")
	case c.Interval < 0:
		return errors.New("Interval must not be negative")
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Breaker is one origin's circuit breaker, safe for concurrent use. A
// caller asks Allow before each attempt; a caller it holds back is called
// back (its wake function) once the breaker half-opens or closes, and asks
// again.
type Breaker struct {
	origin string
	cfg    Config

	// mu guards m, waiters and timer.
	mu sync.Mutex
	m  machine
	// waiters are the callers held back, woken all at once at the next
	// half-open or close: one of them gets the probe, the others wait
	// again.
	waiters []func()
	// timer half-opens the breaker when its interval ends, so that held
	// back callers are woken without asking.
	timer *time.Timer
}

func newBreaker(origin string, cfg Config) *Breaker {
	return &Breaker{origin: origin, cfg: cfg, m: machine{failures: cfg.Failures, interval: cfg.Interval}}
}

// Origin returns the origin the breaker guards.
func (b *Breaker) Origin() string { return b.origin }

// State returns the breaker's state, half-open once its interval passed.
func (b *Breaker) State() State {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.note(b.m.due(b.cfg.Now()))
	return b.m.state
}

// Allow gives a pass for one attempt, or false and wake is kept, to be
// called once when the breaker half-opens or closes. The attempt's
// verdict goes to Report; a pass whose attempt was not made goes to
// Release.
func (b *Breaker) Allow(wake func()) (Pass, bool) {
	b.mu.Lock()
	p, ok, ch := b.m.allow(b.cfg.Now())
	b.note(ch)
	if !ok {
		b.waiters = append(b.waiters, wake)
	}
	b.mu.Unlock()
	return p, ok
}

// TryAllow is Allow without waiting: false leaves no wake behind.
func (b *Breaker) TryAllow() (Pass, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok, ch := b.m.allow(b.cfg.Now())
	// A move to half-open here gives this caller the probe: the waiters
	// wait for its verdict.
	b.note(ch)
	return p, ok
}

// Report takes the verdict of p's attempt; why says what failed (a
// status, an error).
func (b *Breaker) Report(p Pass, v Verdict, why string) {
	b.mu.Lock()
	ch := b.m.report(p, v, why, b.cfg.Now())
	b.note(ch)
	woken := b.wakeable(ch)
	if ch == nil && p.probe {
		// The probe said nothing (a 429, an attempt cut short).
		woken = b.handedOn()
	}
	b.mu.Unlock()
	run(woken)
}

// Release ends p without an attempt: a probe's turn goes on to a waiter.
func (b *Breaker) Release(p Pass) {
	if !p.probe {
		return
	}
	b.mu.Lock()
	b.m.release(p)
	woken := b.handedOn()
	b.mu.Unlock()
	run(woken)
}

// handedOn takes the waiters when the half-open breaker's probe is free
// again (its pass released, or its attempt said nothing): the next caller
// probes, so they must ask again, or they wait for a transition that no
// timer and no probe would bring, the origin held even once it is back.
// Under mu.
func (b *Breaker) handedOn() []func() {
	if b.m.state == HalfOpen && !b.m.probing {
		return b.takeWaiters()
	}
	return nil
}

// tick half-opens the breaker when its interval ended and wakes the
// waiters.
func (b *Breaker) tick() {
	b.mu.Lock()
	ch := b.m.due(b.cfg.Now())
	b.note(ch)
	woken := b.wakeable(ch)
	if ch == nil && b.m.state == Open {
		// Fired early by the clock's reckoning: again at the end.
		b.arm()
	}
	b.mu.Unlock()
	run(woken)
}

// note reports ch and, when the breaker opened, arms its timer. Under mu.
func (b *Breaker) note(ch *change) {
	if ch == nil {
		return
	}
	if ch.to == Open {
		b.arm()
	}
	if b.cfg.OnTransition != nil {
		b.cfg.OnTransition(Transition{Origin: b.origin, From: ch.from, To: ch.to, Reason: ch.reason, At: b.cfg.Now()})
	}
}

func (b *Breaker) arm() {
	d := b.m.until.Sub(b.cfg.Now())
	if b.timer == nil {
		b.timer = time.AfterFunc(max(d, 0), b.tick)
		return
	}
	b.timer.Reset(max(d, 0))
}

// wakeable takes the waiters when ch let callers through. Under mu.
func (b *Breaker) wakeable(ch *change) []func() {
	if ch == nil || ch.to == Open {
		return nil
	}
	return b.takeWaiters()
}

func (b *Breaker) takeWaiters() []func() {
	w := b.waiters
	b.waiters = nil
	return w
}

func run(fs []func()) {
	for _, f := range fs {
		f()
	}
}

// Waiting returns how many callers are held back.
func (b *Breaker) Waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.waiters)
}
