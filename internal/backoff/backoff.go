package backoff

import (
	"context"
	"errors"
	"time"

	cenkalti "github.com/cenkalti/backoff/v4"
)

// Defaults of Config, applied to fields left at zero.
const (
	DefaultInitial    = 100 * time.Millisecond
	DefaultMax        = 10 * time.Second
	DefaultMultiplier = 2.0
	DefaultJitter     = 0.3
)

// Clock is the source of time for waits. Tests inject one that fires at
// once.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer starts a timer of d. The channel receives once d has
	// elapsed; the function stops the timer early and reports whether it
	// did.
	NewTimer(d time.Duration) (<-chan time.Time, func() bool)
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// NewTimer starts a real timer.
func (SystemClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// Config shapes the waits. The zero value is usable: each zero field takes
// the default named in its comment.
type Config struct {
	// Initial is the first wait. Default 100ms.
	Initial time.Duration
	// Max caps every wait. Default 10s.
	Max time.Duration
	// Multiplier grows the wait after each one; at least 1. Default 2.
	Multiplier float64
	// Jitter spreads each wait over [1-j, 1+j] times its value so that
	// many waiters do not wake together; in [0, 1]. Default 0.3: jitter
	// can be made negligible, not turned off.
	Jitter float64
	// Clock times the waits. Nil means the system clock.
	Clock Clock
}

// Validate reports the first invalid field of c.
func (c Config) Validate() error {
	switch {
	case c.Initial < 0:
		return errors.New("backoff: initial must not be negative")
	case c.Max < 0:
		return errors.New("backoff: max must not be negative")
	case c.Multiplier != 0 && c.Multiplier < 1:
		return errors.New("backoff: multiplier must be >= 1")
	case c.Jitter < 0 || c.Jitter > 1:
		return errors.New("backoff: jitter must be between 0 and 1")
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Initial == 0 {
		c.Initial = DefaultInitial
	}
	if c.Max == 0 {
		c.Max = DefaultMax
	}
	if c.Multiplier == 0 {
		c.Multiplier = DefaultMultiplier
	}
	if c.Jitter == 0 {
		c.Jitter = DefaultJitter
	}
	if c.Clock == nil {
		c.Clock = SystemClock{}
	}
	return c
}

// Backoff hands out growing waits. It is not safe for concurrent use: one
// Backoff belongs to one retry loop.
type Backoff struct {
	b     *cenkalti.ExponentialBackOff
	clock Clock
	max   time.Duration
}

// New returns a Backoff shaped by cfg, or an error naming the invalid
// field.
func New(cfg Config) (*Backoff, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	b := &cenkalti.ExponentialBackOff{
		InitialInterval:     cfg.Initial,
		RandomizationFactor: cfg.Jitter,
		Multiplier:          cfg.Multiplier,
		MaxInterval:         cfg.Max,
		MaxElapsedTime:      0, // callers own their budget
		Stop:                cenkalti.Stop,
		Clock:               cfg.Clock,
	}
	b.Reset()
	return &Backoff{b: b, clock: cfg.Clock, max: cfg.Max}, nil
}

// MustNew is New for a Config known to be valid (a literal); it panics
// otherwise.
func MustNew(cfg Config) *Backoff {
	b, err := New(cfg)
	if err != nil {
		panic(err)
	}
	return b
}

// Next returns the next wait and grows the one after it.
func (b *Backoff) Next() time.Duration { return b.b.NextBackOff() }

// Reset starts again from the initial wait.
func (b *Backoff) Reset() { b.b.Reset() }

// Wait sleeps for the next wait, or at least floor when that is longer
// (an endpoint's Retry-After, say), never longer than the configured max.
// It returns the context's cause if ctx ends first.
func (b *Backoff) Wait(ctx context.Context, floor time.Duration) error {
	return Sleep(ctx, b.clock, min(max(b.Next(), floor), b.max))
}

// Sleep blocks for d on clock (nil: the system clock) or until ctx ends,
// whichever comes first; it returns the context's cause in the second
// case.
func Sleep(ctx context.Context, clock Clock, d time.Duration) error {
	if clock == nil {
		clock = SystemClock{}
	}
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	ch, stop := clock.NewTimer(d)
	defer stop()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
