package webhooks

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/keyhook/keyhook/internal/backoff"
)

// Defaults of RetryPolicy, applied by WithDefaults to fields left at zero.
const (
	DefaultInitialInterval     = 500 * time.Millisecond
	DefaultMaxInterval         = 60 * time.Second
	DefaultMultiplier          = 2.0
	DefaultRandomizationFactor = 0.3
)

// ErrRetryBudgetExhausted is wrapped by Result.Err when a delivery stopped
// because its policy allowed no further attempt.
var ErrRetryBudgetExhausted = errors.New("webhooks: retry budget exhausted")

// RetryPolicy says how long to wait between attempts and when to give up.
// Waits grow exponentially with jitter; a zero field takes the default
// named in its comment.
type RetryPolicy struct {
	// InitialInterval is the first wait. Default 500ms.
	InitialInterval time.Duration
	// MaxInterval caps every wait, Retry-After included. Default 60s.
	MaxInterval time.Duration
	// Multiplier grows the wait after each attempt; at least 1. Default 2.
	Multiplier float64
	// RandomizationFactor spreads each wait over [1-f, 1+f] times its
	// value so that endpoints recovering from an outage are not hit by
	// every key at once; in [0, 1]. Zero means the default, 0.3: jitter
	// cannot be turned off entirely, only made negligible.
	RandomizationFactor float64
	// MaxAttempts ends the delivery after this many attempts. 0 means
	// unlimited.
	MaxAttempts int
	// MaxElapsed ends the delivery when the next wait would end more than
	// MaxElapsed after the first attempt began. 0 means unlimited.
	MaxElapsed time.Duration
}

// WithDefaults returns p with every zero field set to its default.
func (p RetryPolicy) WithDefaults() RetryPolicy {
	if p.InitialInterval == 0 {
		p.InitialInterval = DefaultInitialInterval
	}
	if p.MaxInterval == 0 {
		p.MaxInterval = DefaultMaxInterval
	}
	if p.Multiplier == 0 {
		p.Multiplier = DefaultMultiplier
	}
	if p.RandomizationFactor == 0 {
		p.RandomizationFactor = DefaultRandomizationFactor
	}
	return p
}

// Validate reports the first invalid field of p, named as in the
// subscription's JSON ("retry.multiplier must be >= 1"). Zero fields are
// valid: they mean the default.
func (p RetryPolicy) Validate() error {
	switch {
	case p.InitialInterval < 0:
		return errors.New("retry.initial_interval must not be negative")
	case p.MaxInterval < 0:
		return errors.New("retry.max_interval must not be negative")
	case p.Multiplier != 0 && !(p.Multiplier >= 1 && !math.IsInf(p.Multiplier, 1)):
		return errors.New("retry.multiplier must be >= 1")
	case !(p.RandomizationFactor >= 0 && p.RandomizationFactor <= 1):
		return errors.New("retry.randomization_factor must be between 0 and 1")
	case p.MaxAttempts < 0:
		return errors.New("retry.max_attempts must not be negative (0 means unlimited)")
	case p.MaxElapsed < 0:
		return errors.New("retry.max_elapsed must not be negative (0 means unlimited)")
	}
	if d := p.WithDefaults(); d.InitialInterval > d.MaxInterval {
		return fmt.Errorf("retry.initial_interval (%s) must not exceed retry.max_interval (%s)", d.InitialInterval, d.MaxInterval)
	}
	return nil
}

// Result is how a delivery ended.
type Result struct {
	// Outcome is OutcomeSuccess or OutcomeFinal, or OutcomeRetry when the
	// context ended first: the caller must then not ack.
	Outcome Outcome
	// Err is nil on success. Otherwise it says why the delivery ended: the
	// final status or error, [ErrRetryBudgetExhausted] wrapped with the last
	// cause, or the context's error.
	Err error
	// Attempts is how many attempts were made.
	Attempts int
	// Last is the last attempt, zero if none was made.
	Last Attempt
	// First is when the first attempt began; LastAt when the last one ended.
	First, LastAt time.Time
}

// Deliver sends r until it succeeds, turns out final, exhausts p's budget
// (Outcome OutcomeFinal, Err wrapping [ErrRetryBudgetExhausted]) or ctx ends
// (Outcome OutcomeRetry). Between attempts it waits for the exponential
// backoff or the endpoint's Retry-After, whichever is longer, capped at
// p.MaxInterval. onAttempt, if not nil, is called after every attempt, on
// the calling goroutine. With ClientConfig.Limiters, each attempt first
// waits for a slot of its endpoint's [Limiter] and reports its status to it;
// the wait counts toward p.MaxElapsed like any other.
//
// p should have passed Validate; an invalid policy makes no attempt and
// returns OutcomeFinal with the validation error, so the mistake surfaces in
// the dead-letter topic instead of stalling the key forever.
func (c *Client) Deliver(ctx context.Context, r *Request, p RetryPolicy, onAttempt func(Attempt)) Result {
	return c.retry(ctx, p, func(ctx context.Context, n int) (step, error) {
		a, err := c.limited(ctx, r, n)
		if err != nil {
			return step{}, err
		}
		if onAttempt != nil {
			onAttempt(a)
		}
		s := step{a: a, outcome: Classify(a), retryAfter: a.RetryAfter}
		if s.outcome == OutcomeFinal {
			s.err = attemptError(a)
		}
		return s, nil
	})
}

// step is what one attempt of the retry engine found.
type step struct {
	a Attempt
	// outcome is OutcomeRetry when another attempt is wanted.
	outcome Outcome
	// retryAfter is the least wait the endpoint asked for before the next
	// attempt.
	retryAfter time.Duration
	// err says why the attempt did not succeed: the final error, or for a
	// retry a better description than the last status (nil: the last
	// status or attempt error describes it).
	err error
}

// retry is the package's one retry engine, behind [Client.Deliver] and
// [Client.DeliverBatch]: it calls try for attempts 1, 2, ... until one
// succeeds, turns out final, p's budget is spent or ctx ends (try returns
// an error only then, when no attempt was made). Every attempt counts once
// against p.MaxAttempts and p.MaxElapsed, whatever it sent. Between
// attempts it waits for the jittered exponential backoff or the endpoint's
// wish, whichever is longer, capped at p.MaxInterval.
func (c *Client) retry(ctx context.Context, p RetryPolicy, try func(ctx context.Context, n int) (step, error)) Result {
	if err := p.Validate(); err != nil {
		return Result{Outcome: OutcomeFinal, Err: fmt.Errorf("webhooks: deliver: invalid policy: %w", err)}
	}
	p = p.WithDefaults()
	b, err := backoff.New(backoff.Config{
		Initial:    p.InitialInterval,
		Max:        p.MaxInterval,
		Multiplier: p.Multiplier,
		Jitter:     p.RandomizationFactor,
		Clock:      c.clock,
	})
	if err != nil { // a valid policy is a valid backoff; kept final, not a panic
		return Result{Outcome: OutcomeFinal, Err: fmt.Errorf("webhooks: deliver: %w", err)}
	}

	var res Result
	for n := 1; ; n++ {
		s, err := try(ctx, n)
		if err != nil {
			return interrupted(ctx, res)
		}
		if n == 1 {
			res.First = s.a.Started
		}
		res.Attempts, res.Last, res.LastAt = n, s.a, s.a.Started.Add(s.a.Duration)

		switch s.outcome {
		case OutcomeSuccess:
			res.Outcome = OutcomeSuccess
			return res
		case OutcomeFinal:
			res.Outcome, res.Err = OutcomeFinal, s.err
			return res
		}
		if ctx.Err() != nil {
			return interrupted(ctx, res)
		}

		if p.MaxAttempts > 0 && n >= p.MaxAttempts {
			return exhausted(res, fmt.Sprintf("after %d attempts", n), s.err)
		}
		wait := min(max(b.Next(), s.retryAfter), p.MaxInterval)
		if p.MaxElapsed > 0 && c.clock.Now().Sub(res.First)+wait > p.MaxElapsed {
			return exhausted(res, fmt.Sprintf("after %d attempts within %s", n, p.MaxElapsed), s.err)
		}
		if err := backoff.Sleep(ctx, c.clock, wait); err != nil {
			return interrupted(ctx, res)
		}
	}
}

func interrupted(ctx context.Context, res Result) Result {
	res.Outcome = OutcomeRetry
	res.Err = fmt.Errorf("webhooks: delivery interrupted: %w", context.Cause(ctx))
	return res
}

func exhausted(res Result, when string, cause error) Result {
	res.Outcome = OutcomeFinal
	if cause != nil {
		res.Err = fmt.Errorf("%w %s: %w", ErrRetryBudgetExhausted, when, cause)
	} else if res.Last.Err != nil {
		res.Err = fmt.Errorf("%w %s: %w", ErrRetryBudgetExhausted, when, res.Last.Err)
	} else {
		res.Err = fmt.Errorf("%w %s: last status %s", ErrRetryBudgetExhausted, when, statusText(res.Last.Status))
	}
	return res
}

// attemptError describes why a final attempt failed.
func attemptError(a Attempt) error {
	if a.Err != nil {
		return a.Err
	}
	return fmt.Errorf("webhooks: endpoint answered %s, which is final", statusText(a.Status))
}

func statusText(status int) string {
	if t := http.StatusText(status); t != "" {
		return fmt.Sprintf("%d %s", status, t)
	}
	return fmt.Sprint(status)
}
