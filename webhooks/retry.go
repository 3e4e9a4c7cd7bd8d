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
//
// Deliver holds its goroutine through the waits between attempts; a
// caller that runs many deliveries on a few goroutines makes the attempts
// itself with [Client.Attempt] and a [Retries] instead.
func (c *Client) Deliver(ctx context.Context, r *Request, p RetryPolicy, onAttempt func(Attempt)) Result {
	rt := NewRetries(p, c.clock)
	for !rt.Done() {
		a, err := c.limited(ctx, r, rt.Next())
		if err != nil {
			return rt.Interrupt(context.Cause(ctx))
		}
		if onAttempt != nil {
			onAttempt(a)
		}
		if ctx.Err() != nil && Classify(a) == OutcomeRetry {
			// Ended while the attempt ran: no budget decision on a cut
			// attempt, and no ack either.
			rt.note(a)
			return rt.Interrupt(context.Cause(ctx))
		}
		wait, more := rt.Record(a)
		if more && !c.sleep(ctx, wait) {
			return rt.Interrupt(context.Cause(ctx))
		}
	}
	return rt.Result()
}

// Attempt makes attempt n of r inside its endpoint's [Limiter] when the
// client has ClientConfig.Limiters, and reports its status to it: one step
// of a delivery whose waits the caller keeps (see [Retries]). It fails,
// making no attempt, only when ctx ends while it waits for the limiter.
func (c *Client) Attempt(ctx context.Context, r *Request, n int) (Attempt, error) {
	return c.limited(ctx, r, n)
}

// AttemptIn is [Client.Attempt] in s, a slot of r's endpoint's limiter
// (from [Client.Limiter]) the caller took without blocking
// ([Limiter.TryAcquire], [Limiter.Wait]): the attempt gives s back with its
// status, as Attempt does its own slot.
func (c *Client) AttemptIn(ctx context.Context, r *Request, n int, s *Slot) Attempt {
	a := c.Send(ctx, r, n)
	s.Release(limitStatus(a.Status, n))
	return a
}

// Limiter returns the limiter of rawURL's endpoint origin, which Attempt
// waits on: nil without ClientConfig.Limiters, or when rawURL has no http
// or https origin (Attempt then makes its attempt without one).
func (c *Client) Limiter(rawURL string) *Limiter {
	if c.cfg.Limiters == nil {
		return nil
	}
	l, err := c.cfg.Limiters.For(rawURL)
	if err != nil {
		return nil
	}
	return l
}

// sleep waits d or until ctx ends; false when ctx ended first.
func (c *Client) sleep(ctx context.Context, d time.Duration) bool {
	if ctx.Err() != nil {
		return false
	}
	return backoff.Sleep(ctx, c.clock, d) == nil
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

// Retries is the package's one retry engine, behind [Client.Deliver] and
// [Client.DeliverBatch]: one delivery's budget, spent one attempt at a
// time. The caller makes attempt [Retries.Next], hands it to
// [Retries.Record], and waits as long as Record says before the next one,
// however it likes: a delivery pool gives an attempt a slot and lets the
// record wait for its retry on a timer, without a goroutine.
//
// Every attempt counts once against p.MaxAttempts and p.MaxElapsed,
// whatever it sent. The wait between attempts is the jittered exponential
// backoff or the endpoint's wish, whichever is longer, capped at
// p.MaxInterval. A Retries is not safe for concurrent use.
type Retries struct {
	p     RetryPolicy
	clock Clock
	b     *backoff.Backoff
	res   Result
	done  bool
	// held is time the delivery was held back by keyhook itself (a rate
	// limit, an open circuit breaker), not counted against MaxElapsed.
	held time.Duration
}

// NewRetries returns the budget of one delivery under p, timed by clock
// (nil: the system clock). p should have passed Validate; an invalid
// policy gives a Retries that is already done, OutcomeFinal with the
// validation error, so the mistake surfaces in the dead-letter topic
// instead of stalling the key forever.
func NewRetries(p RetryPolicy, clock Clock) *Retries {
	rt := new(Retries)
	rt.Reset(p, clock)
	return rt
}

// Reset makes rt the budget [NewRetries] returns for p and clock, in rt's
// own memory: a caller that keeps a Retries in the state of each delivery
// allocates nothing for it.
func (rt *Retries) Reset(p RetryPolicy, clock Clock) {
	if clock == nil {
		clock = systemClock{}
	}
	*rt = Retries{clock: clock}
	if err := p.Validate(); err != nil {
		rt.end(OutcomeFinal, fmt.Errorf("webhooks: deliver: invalid policy: %w", err))
		return
	}
	rt.p = p.WithDefaults()
	if err := rt.backoffConfig().Validate(); err != nil { // a valid policy is a valid backoff; kept final, not a panic
		rt.end(OutcomeFinal, fmt.Errorf("webhooks: deliver: %w", err))
	}
}

// backoffConfig is the backoff of rt's policy. The backoff itself is
// made at the first retry: most deliveries succeed at once and never
// wait.
func (rt *Retries) backoffConfig() backoff.Config {
	return backoff.Config{
		Initial:    rt.p.InitialInterval,
		Max:        rt.p.MaxInterval,
		Multiplier: rt.p.Multiplier,
		Jitter:     rt.p.RandomizationFactor,
		Clock:      rt.clock,
	}
}

// Hold takes d off the time counted against MaxElapsed: the delivery
// waited that long for keyhook (a rate limit, an open circuit breaker),
// not for its endpoint, so the wait spends none of its budget.
func (rt *Retries) Hold(d time.Duration) {
	if d > 0 {
		rt.held += d
	}
}

// Next is the number of the next attempt, from 1.
func (rt *Retries) Next() int { return rt.res.Attempts + 1 }

// Done reports that the delivery ended: Result says how.
func (rt *Retries) Done() bool { return rt.done }

// Result is how the delivery ended, or where it stands while it goes on.
func (rt *Retries) Result() Result { return rt.res }

// Record takes attempt a of a single request: success and final answers
// end the delivery; otherwise more is true, unless the budget is spent,
// and wait is how long to wait before the next attempt.
func (rt *Retries) Record(a Attempt) (wait time.Duration, more bool) {
	s := step{a: a, outcome: Classify(a), retryAfter: a.RetryAfter}
	if s.outcome == OutcomeFinal {
		s.err = attemptError(a)
	}
	return rt.record(s)
}

// Interrupt ends the delivery without another attempt, because of cause
// (the caller's context ended, or it stopped retrying): OutcomeRetry, which
// must not be acked.
func (rt *Retries) Interrupt(cause error) Result {
	if !rt.done {
		rt.end(OutcomeRetry, fmt.Errorf("webhooks: delivery interrupted: %w", cause))
	}
	return rt.res
}

func (rt *Retries) end(o Outcome, err error) {
	rt.res.Outcome, rt.res.Err, rt.done = o, err, true
}

// note counts attempt a, whatever comes of it.
func (rt *Retries) note(a Attempt) {
	n := rt.Next()
	if n == 1 {
		rt.res.First = a.Started
	}
	rt.res.Attempts, rt.res.Last, rt.res.LastAt = n, a, a.Started.Add(a.Duration)
}

// record is Record for any kind of attempt.
func (rt *Retries) record(s step) (time.Duration, bool) {
	if rt.done {
		return 0, false
	}
	rt.note(s.a)
	n := rt.res.Attempts
	switch s.outcome {
	case OutcomeSuccess:
		rt.end(OutcomeSuccess, nil)
		return 0, false
	case OutcomeFinal:
		rt.end(OutcomeFinal, s.err)
		return 0, false
	}
	if p := rt.p; p.MaxAttempts > 0 && n >= p.MaxAttempts {
		rt.res = exhausted(rt.res, fmt.Sprintf("after %d attempts", n), s.err)
		rt.done = true
		return 0, false
	}
	if rt.b == nil {
		rt.b = backoff.MustNew(rt.backoffConfig()) // checked by Reset
	}
	wait := min(max(rt.b.Next(), s.retryAfter), rt.p.MaxInterval)
	if p := rt.p; p.MaxElapsed > 0 && rt.clock.Now().Sub(rt.res.First)-rt.held+wait > p.MaxElapsed {
		rt.res = exhausted(rt.res, fmt.Sprintf("after %d attempts within %s", n, p.MaxElapsed), s.err)
		rt.done = true
		return 0, false
	}
	return wait, true
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
