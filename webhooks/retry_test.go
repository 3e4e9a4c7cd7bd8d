package webhooks_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keyhook/keyhook/webhooks"
)

// fakeClock makes every wait return at once, moving its time forward by the
// wait and recording it, so backoff costs no real time.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	waits []time.Duration
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2030, time.January, 2, 3, 4, 5, 0, time.UTC)}
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.waits = append(f.waits, d)
	f.now = f.now.Add(d)
	ch := make(chan time.Time, 1)
	ch <- f.now
	return ch, func() bool { return false }
}

// Waits returns the waits so far, rounded to the millisecond: the jitter
// can be made tiny but never zero, and moves a wait by a nanosecond.
func (f *fakeClock) Waits() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]time.Duration, len(f.waits))
	for i, d := range f.waits {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// stuckClock never fires its timers; it announces each one on started so a
// test knows Deliver is waiting.
type stuckClock struct {
	started chan time.Duration
}

func (stuckClock) Now() time.Time { return time.Now() }

func (s stuckClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	s.started <- d
	return make(chan time.Time), func() bool { return true }
}

// tinyJitter makes backoff waits predictable to the millisecond in tests;
// zero would mean the default factor.
const tinyJitter = 1e-12

func TestDeliverSucceedsOnAFlappingEndpointAfterThreeAttempts(t *testing.T) {
	ep := newEndpoint(t, statuses(503, 503, 200))
	// The system clock with millisecond waits: the real timer path, still fast.
	c := newClient(t, webhooks.ClientConfig{})
	var seen []int
	policy := webhooks.RetryPolicy{InitialInterval: time.Millisecond, MaxInterval: 5 * time.Millisecond}

	res := c.Deliver(context.Background(), &webhooks.Request{URL: ep.URL, DeliveryID: "d"}, policy, func(a webhooks.Attempt) {
		seen = append(seen, a.Status)
	})

	if res.Outcome != webhooks.OutcomeSuccess || res.Attempts != 3 || res.Err != nil {
		t.Fatalf("Deliver = {%s, %d attempts, %v}, want {success, 3, nil}", res.Outcome, res.Attempts, res.Err)
	}
	if diff := cmp.Diff([]int{503, 503, 200}, seen); diff != "" {
		t.Errorf("statuses seen by onAttempt (-want +got):\n%s", diff)
	}
	if res.Last.Status != 200 || res.Last.Number != 3 {
		t.Errorf("Last = {Number %d, Status %d}, want {3, 200}", res.Last.Number, res.Last.Status)
	}
	if res.First.IsZero() || res.LastAt.Before(res.First) {
		t.Errorf("First %v, LastAt %v: want First set and LastAt after it", res.First, res.LastAt)
	}
}

func TestDeliverKeepsWebhookIDAndCountsAttemptsInHeaders(t *testing.T) {
	ep := newEndpoint(t, statuses(500, 502, 204))
	clock := newFakeClock()
	c := newClient(t, webhooks.ClientConfig{Clock: clock})

	res := c.Deliver(context.Background(), &webhooks.Request{URL: ep.URL, DeliveryID: "orders-3-1017"}, webhooks.RetryPolicy{}, nil)

	if res.Outcome != webhooks.OutcomeSuccess {
		t.Fatalf("Deliver outcome = %s (%v), want success", res.Outcome, res.Err)
	}
	type ids struct{ WebhookID, Attempt string }
	var got []ids
	for _, r := range ep.requests() {
		got = append(got, ids{r.Header.Get("Webhook-Id"), r.Header.Get("Keyhook-Attempt")})
	}
	want := []ids{{"orders-3-1017", "1"}, {"orders-3-1017", "2"}, {"orders-3-1017", "3"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("webhook-id and keyhook-attempt per request (-want +got):\n%s", diff)
	}
}

func TestDeliverWaitsForRetryAfterWithinMaxInterval(t *testing.T) {
	clockStart := newFakeClock().Now()
	tests := []struct {
		name       string
		retryAfter string
		want       time.Duration
	}{
		{"seconds longer than the backoff", "7", 7 * time.Second},
		{"date", clockStart.Add(20 * time.Second).Format(http.TimeFormat), 20 * time.Second},
		{"capped at MaxInterval", "3600", 30 * time.Second},
		{"shorter than the backoff", "0", 100 * time.Millisecond},
		{"garbage falls back to the backoff", "later", 100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ep := newEndpoint(t, func(w http.ResponseWriter, _ *http.Request, n int) {
				if n == 1 {
					w.Header().Set("Retry-After", tt.retryAfter)
					w.WriteHeader(http.StatusTooManyRequests)
				}
			})
			clock := newFakeClock()
			c := newClient(t, webhooks.ClientConfig{Clock: clock})
			policy := webhooks.RetryPolicy{
				InitialInterval:     100 * time.Millisecond,
				MaxInterval:         30 * time.Second,
				RandomizationFactor: tinyJitter,
			}

			start := time.Now()
			res := c.Deliver(context.Background(), &webhooks.Request{URL: ep.URL}, policy, nil)

			if res.Outcome != webhooks.OutcomeSuccess || res.Attempts != 2 {
				t.Fatalf("Deliver = {%s, %d attempts, %v}, want {success, 2}", res.Outcome, res.Attempts, res.Err)
			}
			if diff := cmp.Diff([]time.Duration{tt.want}, clock.Waits()); diff != "" {
				t.Errorf("waits (-want +got):\n%s", diff)
			}
			if real := time.Since(start); real > 5*time.Second {
				t.Errorf("Deliver took %s of real time; the fake clock should make waits free", real)
			}
		})
	}
}

func TestDeliverBacksOffExponentially(t *testing.T) {
	ep := newEndpoint(t, statuses(503))
	clock := newFakeClock()
	c := newClient(t, webhooks.ClientConfig{Clock: clock})
	policy := webhooks.RetryPolicy{
		InitialInterval:     time.Second,
		MaxInterval:         5 * time.Second,
		Multiplier:          2,
		RandomizationFactor: tinyJitter,
		MaxAttempts:         6,
	}

	c.Deliver(context.Background(), &webhooks.Request{URL: ep.URL}, policy, nil)

	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	if diff := cmp.Diff(want, clock.Waits()); diff != "" {
		t.Errorf("waits (-want +got):\n%s", diff)
	}
}

func TestDeliverStopsAtTheFirstFinalResponse(t *testing.T) {
	ep := newEndpoint(t, statuses(http.StatusBadRequest))
	clock := newFakeClock()
	c := newClient(t, webhooks.ClientConfig{Clock: clock})

	res := c.Deliver(context.Background(), &webhooks.Request{URL: ep.URL}, webhooks.RetryPolicy{}, nil)

	if res.Outcome != webhooks.OutcomeFinal || res.Attempts != 1 || res.Last.Status != 400 {
		t.Fatalf("Deliver = {%s, %d attempts, status %d}, want {final, 1, 400}", res.Outcome, res.Attempts, res.Last.Status)
	}
	if want := "webhooks: endpoint answered 400 Bad Request, which is final"; res.Err == nil || res.Err.Error() != want {
		t.Errorf("Err = %v, want %q", res.Err, want)
	}
	if errors.Is(res.Err, webhooks.ErrRetryBudgetExhausted) {
		t.Errorf("a final status is not an exhausted budget: %v", res.Err)
	}
	if n := len(clock.Waits()); n != 0 {
		t.Errorf("Deliver waited %d times, want 0", n)
	}
}

func TestDeliverMakesForbiddenAddressesFinalWithoutContactingTheEndpoint(t *testing.T) {
	ep := newEndpoint(t, statuses(http.StatusOK))
	c := newStrictClient(t, webhooks.ClientConfig{Clock: newFakeClock()})

	res := c.Deliver(context.Background(), &webhooks.Request{URL: ep.URL}, webhooks.RetryPolicy{}, nil)

	var fa *webhooks.ErrForbiddenAddress
	if res.Outcome != webhooks.OutcomeFinal || res.Attempts != 1 || !errors.As(res.Err, &fa) {
		t.Fatalf("Deliver = {%s, %d attempts, %v}, want {final, 1, forbidden address}", res.Outcome, res.Attempts, res.Err)
	}
	if c := ep.conns.Load(); c != 0 {
		t.Errorf("endpoint saw %d connections, want 0", c)
	}
}

func TestDeliverEndsFinalWhenTheBudgetIsSpent(t *testing.T) {
	tests := []struct {
		name         string
		policy       webhooks.RetryPolicy
		wantAttempts int
		wantErr      string
	}{
		{
			name:         "max attempts",
			policy:       webhooks.RetryPolicy{MaxAttempts: 4},
			wantAttempts: 4,
			wantErr:      "webhooks: retry budget exhausted after 4 attempts: last status 503 Service Unavailable",
		},
		{
			name: "max elapsed",
			// Waits of 1s, 2s, 4s: the third would end 7s after the start.
			policy:       webhooks.RetryPolicy{InitialInterval: time.Second, Multiplier: 2, RandomizationFactor: tinyJitter, MaxElapsed: 5 * time.Second},
			wantAttempts: 3,
			wantErr:      "webhooks: retry budget exhausted after 3 attempts within 5s: last status 503 Service Unavailable",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ep := newEndpoint(t, statuses(http.StatusServiceUnavailable))
			c := newClient(t, webhooks.ClientConfig{Clock: newFakeClock()})
			var calls int

			res := c.Deliver(context.Background(), &webhooks.Request{URL: ep.URL}, tt.policy, func(webhooks.Attempt) { calls++ })

			if res.Outcome != webhooks.OutcomeFinal || res.Attempts != tt.wantAttempts || calls != tt.wantAttempts {
				t.Fatalf("Deliver = {%s, %d attempts, %d callbacks}, want {final, %d, %d}", res.Outcome, res.Attempts, calls, tt.wantAttempts, tt.wantAttempts)
			}
			if !errors.Is(res.Err, webhooks.ErrRetryBudgetExhausted) {
				t.Errorf("Err = %v, want ErrRetryBudgetExhausted", res.Err)
			}
			if res.Err.Error() != tt.wantErr {
				t.Errorf("Err = %q, want %q", res.Err, tt.wantErr)
			}
			if res.Last.Status != 503 {
				t.Errorf("Last.Status = %d, want the real last status 503", res.Last.Status)
			}
		})
	}
}

func TestDeliverExhaustedBudgetWrapsTheLastConnectionError(t *testing.T) {
	c := newClient(t, webhooks.ClientConfig{Clock: newFakeClock(), Timeout: 50 * time.Millisecond})
	ep := newEndpoint(t, func(_ http.ResponseWriter, r *http.Request, _ int) { <-r.Context().Done() })

	res := c.Deliver(context.Background(), &webhooks.Request{URL: ep.URL}, webhooks.RetryPolicy{MaxAttempts: 2}, nil)

	if res.Outcome != webhooks.OutcomeFinal || !errors.Is(res.Err, webhooks.ErrRetryBudgetExhausted) || !errors.Is(res.Err, context.DeadlineExceeded) {
		t.Fatalf("Deliver = {%s, %v}, want final, wrapping both the budget and the timeout", res.Outcome, res.Err)
	}
}

func TestDeliverReturnsRetryPromptlyWhenCanceledDuringBackoff(t *testing.T) {
	ep := newEndpoint(t, statuses(http.StatusServiceUnavailable))
	clock := stuckClock{started: make(chan time.Duration, 1)}
	c := newClient(t, webhooks.ClientConfig{Clock: clock})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	done := make(chan webhooks.Result, 1)
	go func() {
		done <- c.Deliver(ctx, &webhooks.Request{URL: ep.URL}, webhooks.RetryPolicy{InitialInterval: time.Hour, MaxInterval: time.Hour}, nil)
	}()
	<-clock.started // Deliver is now waiting for a timer that never fires
	cancel()

	select {
	case res := <-done:
		if res.Outcome != webhooks.OutcomeRetry || res.Attempts != 1 {
			t.Errorf("Deliver = {%s, %d attempts}, want {retry, 1}", res.Outcome, res.Attempts)
		}
		if !errors.Is(res.Err, context.Canceled) {
			t.Errorf("Err = %v, want context.Canceled", res.Err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Deliver did not return after its context was canceled")
	}
}

func TestDeliverReturnsRetryWhenCanceledDuringAnAttempt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ep := newEndpoint(t, func(_ http.ResponseWriter, r *http.Request, _ int) {
		cancel() // the node shuts down while the endpoint is working
		<-r.Context().Done()
	})
	c := newClient(t, webhooks.ClientConfig{Clock: newFakeClock()})

	res := c.Deliver(ctx, &webhooks.Request{URL: ep.URL}, webhooks.RetryPolicy{}, nil)

	if res.Outcome != webhooks.OutcomeRetry || res.Attempts != 1 || !errors.Is(res.Err, context.Canceled) {
		t.Fatalf("Deliver = {%s, %d attempts, %v}, want {retry, 1, canceled}: shutdown must not dead-letter", res.Outcome, res.Attempts, res.Err)
	}
}

func TestDeliverRefusesAnInvalidPolicyWithoutSending(t *testing.T) {
	ep := newEndpoint(t, statuses(http.StatusOK))
	c := newClient(t, webhooks.ClientConfig{Clock: newFakeClock()})

	res := c.Deliver(context.Background(), &webhooks.Request{URL: ep.URL}, webhooks.RetryPolicy{Multiplier: 0.5}, nil)

	if res.Outcome != webhooks.OutcomeFinal || res.Attempts != 0 || res.Err == nil || !strings.Contains(res.Err.Error(), "retry.multiplier must be >= 1") {
		t.Fatalf("Deliver = {%s, %d attempts, %v}, want {final, 0, naming retry.multiplier}", res.Outcome, res.Attempts, res.Err)
	}
	if n := len(ep.requests()); n != 0 {
		t.Errorf("endpoint saw %d requests, want 0", n)
	}
}

func TestRetryPolicyValidateNamesTheBadField(t *testing.T) {
	tests := []struct {
		p    webhooks.RetryPolicy
		want string
	}{
		{webhooks.RetryPolicy{}, ""},
		{webhooks.RetryPolicy{InitialInterval: time.Second, MaxInterval: time.Minute, Multiplier: 1, RandomizationFactor: 1, MaxAttempts: 10, MaxElapsed: time.Hour}, ""},
		{webhooks.RetryPolicy{InitialInterval: -1}, "retry.initial_interval must not be negative"},
		{webhooks.RetryPolicy{MaxInterval: -1}, "retry.max_interval must not be negative"},
		{webhooks.RetryPolicy{Multiplier: 0.5}, "retry.multiplier must be >= 1"},
		{webhooks.RetryPolicy{Multiplier: -2}, "retry.multiplier must be >= 1"},
		{webhooks.RetryPolicy{Multiplier: nan()}, "retry.multiplier must be >= 1"},
		{webhooks.RetryPolicy{Multiplier: inf()}, "retry.multiplier must be >= 1"},
		{webhooks.RetryPolicy{RandomizationFactor: 1.5}, "retry.randomization_factor must be between 0 and 1"},
		{webhooks.RetryPolicy{RandomizationFactor: -0.1}, "retry.randomization_factor must be between 0 and 1"},
		{webhooks.RetryPolicy{MaxAttempts: -1}, "retry.max_attempts must not be negative (0 means unlimited)"},
		{webhooks.RetryPolicy{MaxElapsed: -time.Second}, "retry.max_elapsed must not be negative (0 means unlimited)"},
		{webhooks.RetryPolicy{InitialInterval: 2 * time.Minute}, "retry.initial_interval (2m0s) must not exceed retry.max_interval (1m0s)"},
	}
	for i, tt := range tests {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			got := ""
			if err := tt.p.Validate(); err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("Validate(%+v) = %q, want %q", tt.p, got, tt.want)
			}
		})
	}
}

func TestRetryPolicyWithDefaultsFillsOnlyZeroFields(t *testing.T) {
	got := webhooks.RetryPolicy{MaxInterval: 10 * time.Second, MaxAttempts: 5}.WithDefaults()
	want := webhooks.RetryPolicy{
		InitialInterval:     500 * time.Millisecond,
		MaxInterval:         10 * time.Second,
		Multiplier:          2,
		RandomizationFactor: 0.3,
		MaxAttempts:         5,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("WithDefaults (-want +got):\n%s", diff)
	}
}

func nan() float64 { z := 0.0; return z / z }
func inf() float64 { z := 0.0; return 1 / z }

// Retries spends the same budget as Deliver but leaves every wait to the
// caller: it sleeps on no timer of its own, and says how long to wait.
func TestRetriesLeaveTheWaitsToTheCaller(t *testing.T) {
	unavailable := func(retryAfter time.Duration) webhooks.Attempt {
		return webhooks.Attempt{Status: http.StatusServiceUnavailable, RetryAfter: retryAfter}
	}
	policy := webhooks.RetryPolicy{InitialInterval: 100 * time.Millisecond, MaxInterval: time.Second,
		Multiplier: 2, RandomizationFactor: 1e-9, MaxAttempts: 4}
	for _, tc := range []struct {
		name      string
		attempts  []webhooks.Attempt
		wantWaits []time.Duration
		want      webhooks.Outcome
		exhausted bool
	}{
		{"backs off until the budget is spent",
			[]webhooks.Attempt{unavailable(0), unavailable(0), unavailable(0), unavailable(0)},
			[]time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}, webhooks.OutcomeFinal, true},
		{"honours Retry-After within MaxInterval",
			[]webhooks.Attempt{unavailable(700 * time.Millisecond), unavailable(5 * time.Second), {Status: http.StatusNoContent}},
			[]time.Duration{700 * time.Millisecond, time.Second}, webhooks.OutcomeSuccess, false},
		{"ends at a final answer",
			[]webhooks.Attempt{unavailable(0), {Status: http.StatusBadRequest}},
			[]time.Duration{100 * time.Millisecond}, webhooks.OutcomeFinal, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			rt := webhooks.NewRetries(policy, clock)
			var waits []time.Duration
			for i, a := range tc.attempts {
				if rt.Done() {
					t.Fatalf("done after %d attempts, want %d", i, len(tc.attempts))
				}
				if n := rt.Next(); n != i+1 {
					t.Fatalf("Next = %d, want %d", n, i+1)
				}
				if wait, more := rt.Record(a); more {
					waits = append(waits, wait.Round(time.Millisecond))
				}
			}
			if !rt.Done() {
				t.Fatal("not done after the last attempt")
			}
			if diff := cmp.Diff(tc.wantWaits, waits); diff != "" {
				t.Errorf("waits (-want +got):\n%s", diff)
			}
			if len(clock.Waits()) != 0 {
				t.Errorf("Retries slept on the clock: %v", clock.Waits())
			}
			res := rt.Result()
			if res.Outcome != tc.want || res.Attempts != len(tc.attempts) {
				t.Errorf("result = %v after %d attempts, want %v after %d", res.Outcome, res.Attempts, tc.want, len(tc.attempts))
			}
			if got := errors.Is(res.Err, webhooks.ErrRetryBudgetExhausted); got != tc.exhausted {
				t.Errorf("budget exhausted = %v (%v), want %v", got, res.Err, tc.exhausted)
			}
		})
	}
}

// A caller that stops retrying ends the delivery as OutcomeRetry, never
// acked, with the attempts made so far.
func TestRetriesInterruptedEndWithoutAck(t *testing.T) {
	rt := webhooks.NewRetries(webhooks.RetryPolicy{}, newFakeClock())
	if _, more := rt.Record(webhooks.Attempt{Status: http.StatusServiceUnavailable}); !more {
		t.Fatal("a 503 ended the delivery")
	}
	cause := errors.New("partition released")
	res := rt.Interrupt(cause)
	if res.Outcome != webhooks.OutcomeRetry || res.Attempts != 1 || !errors.Is(res.Err, cause) || !rt.Done() {
		t.Fatalf("Interrupt = %v after %d attempts (%v), want OutcomeRetry after 1 wrapping the cause", res.Outcome, res.Attempts, res.Err)
	}
}

// Time the delivery was held by keyhook (Hold) is not counted against
// MaxElapsed: the same wait without it spends the budget.
func TestRetriesHeldTimeSpendsNoBudget(t *testing.T) {
	policy := webhooks.RetryPolicy{InitialInterval: 100 * time.Millisecond, MaxInterval: 100 * time.Millisecond,
		RandomizationFactor: 1e-9, MaxElapsed: 10 * time.Second}
	for _, held := range []bool{false, true} {
		clock := newFakeClock()
		rt := webhooks.NewRetries(policy, clock)
		rt.Record(webhooks.Attempt{Status: http.StatusServiceUnavailable, Started: clock.Now()})
		clock.NewTimer(20 * time.Second) // a breaker open this long
		if held {
			rt.Hold(20 * time.Second)
		}
		_, more := rt.Record(webhooks.Attempt{Status: http.StatusServiceUnavailable, Started: clock.Now()})
		if more != held {
			t.Errorf("held %v: another attempt = %v, want %v", held, more, held)
		}
	}
}
