package webhooks_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/keyhook/keyhook/webhooks"
)

func newLimiter(t *testing.T, max int) *webhooks.Limiter {
	t.Helper()
	ls, err := webhooks.NewLimiters(webhooks.LimiterConfig{Max: max})
	if err != nil {
		t.Fatal(err)
	}
	l, err := ls.For("https://hooks.example.com/a")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// limitedEndpoint starts an endpoint answering every request status,
// closed with the test, and a client sending inside limiters of max.
func limitedEndpoint(t *testing.T, status, max int) (*httptest.Server, *webhooks.Limiters, *webhooks.Client) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	ls, err := webhooks.NewLimiters(webhooks.LimiterConfig{Max: max})
	if err != nil {
		t.Fatal(err)
	}
	c, err := webhooks.NewClient(webhooks.ClientConfig{Policy: webhooks.AddressPolicy{AllowPrivate: true}, Limiters: ls})
	if err != nil {
		t.Fatal(err)
	}
	return srv, ls, c
}

func acquire(t *testing.T, l *webhooks.Limiter) func(int) {
	t.Helper()
	release, err := l.Acquire(context.Background())
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	return release
}

// canceled is a context that has already ended: Acquire with it succeeds
// only if a slot is free at once.
func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func TestLimiterHalvesOncePerOverloadAndGrowsBackGradually(t *testing.T) {
	l := newLimiter(t, 8)
	var held []func(int)
	for range 8 {
		held = append(held, acquire(t, l))
	}
	if _, err := l.Acquire(canceled()); !errors.Is(err, context.Canceled) {
		t.Fatalf("ninth Acquire = %v, want to wait (and give up: context canceled)", err)
	}

	// The endpoint throttles: every request in flight comes back 429, but
	// the limit halves once, not eight times.
	for _, release := range held {
		release(http.StatusTooManyRequests)
	}
	if got := l.Limit(); got != 4 {
		t.Fatalf("after one overload Limit() = %d, want 4", got)
	}

	// At the new limit, successes grow it by one per limit's worth.
	held = held[:0]
	for range 4 {
		held = append(held, acquire(t, l))
	}
	if _, err := l.Acquire(canceled()); err == nil {
		t.Fatal("fifth Acquire at limit 4 got a slot")
	}
	var limits []int
	for i := range 20 {
		held[i%4](http.StatusOK)
		held[i%4] = acquire(t, l)
		limits = append(limits, l.Limit())
	}
	want := []int{4, 4, 4, 4, 5, 5, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7}
	if diff := cmp.Diff(want, limits); diff != "" {
		t.Errorf("limit after each success (-want +got):\n%s", diff)
	}

	// A request acquired after the decrease throttles again: halve again,
	// from the 4 requests that were in flight rather than from a limit of
	// 7 that was never used.
	held[0](http.StatusServiceUnavailable)
	if got := l.Limit(); got != 7 {
		t.Errorf("after one throttled request Limit() = %d, want still 7: one request is not overload", got)
	}
	held[1](http.StatusServiceUnavailable)
	if got := l.Limit(); got != 2 {
		t.Errorf("after a second overload Limit() = %d, want 2 (half of the 4 in flight)", got)
	}
	for _, release := range held[2:] {
		release(http.StatusOK)
	}
	if got := l.InFlight(); got != 0 {
		t.Errorf("InFlight() = %d after every release, want 0", got)
	}
}

func TestLimiterNeverGrowsPastMaxNorBelowOne(t *testing.T) {
	l := newLimiter(t, 3)
	for range 50 {
		a, b, c := acquire(t, l), acquire(t, l), acquire(t, l)
		a(http.StatusOK)
		b(http.StatusOK)
		c(http.StatusOK)
	}
	if got := l.Limit(); got != 3 {
		t.Errorf("after many successes Limit() = %d, want the max 3", got)
	}
	for range 10 {
		acquire(t, l)(http.StatusTooManyRequests)
	}
	if got := l.Limit(); got != 1 {
		t.Errorf("after many overloads Limit() = %d, want the floor 1", got)
	}
}

func TestLimiterWithoutMaxCountsUntilTheFirstThrottle(t *testing.T) {
	l := newLimiter(t, 0)
	var held []func(int)
	for range 10 {
		held = append(held, acquire(t, l))
	}
	if got := l.Limit(); got != 0 {
		t.Fatalf("Limit() = %d before any throttle, want 0 (unlimited)", got)
	}

	held[0](http.StatusTooManyRequests)
	held[1](http.StatusTooManyRequests)

	if got := l.Limit(); got != 5 {
		t.Errorf("Limit() = %d after throttles at 10 in flight, want 5", got)
	}
	for _, release := range held[2:] {
		release(0) // no response: says nothing about the endpoint's capacity
	}
	if got := l.Limit(); got != 5 {
		t.Errorf("Limit() = %d after attempts without response, want still 5", got)
	}
}

func TestLimiterServesWaitersInOrderAndForgetsThoseWhoLeave(t *testing.T) {
	l := newLimiter(t, 1)
	release := acquire(t, l)

	leaving, leave := context.WithCancel(context.Background())
	got := make(chan string, 3)
	var wg sync.WaitGroup
	wait := func(name string, ctx context.Context) {
		defer wg.Done()
		r, err := l.Acquire(ctx)
		if err != nil {
			got <- name + " left"
			return
		}
		got <- name
		r(http.StatusOK)
	}
	// Start the waiters one at a time, so their order is known.
	for _, w := range []struct {
		name string
		ctx  context.Context
	}{{"first", context.Background()}, {"leaver", leaving}, {"third", context.Background()}} {
		wg.Add(1)
		before := l.Waiting()
		go wait(w.name, w.ctx)
		for l.Waiting() == before {
			time.Sleep(time.Millisecond)
		}
	}
	leave()
	if g := <-got; g != "leaver left" {
		t.Fatalf("first to return = %q, want the waiter whose context ended", g)
	}

	release(http.StatusOK)
	wg.Wait()
	close(got)
	var order []string
	for g := range got {
		order = append(order, g)
	}
	if diff := cmp.Diff([]string{"first", "third"}, order); diff != "" {
		t.Errorf("slots granted (-want +got):\n%s", diff)
	}
	if n := l.InFlight(); n != 0 {
		t.Errorf("InFlight() = %d, want 0: a waiter that left must not keep a slot", n)
	}
}

func TestLimiterReleaseTwiceCountsOnce(t *testing.T) {
	l := newLimiter(t, 2)
	release, other := acquire(t, l), acquire(t, l)
	release(http.StatusTooManyRequests)
	release(http.StatusTooManyRequests)
	if got := []int{l.InFlight(), l.Limit()}; !cmp.Equal(got, []int{1, 2}) {
		t.Errorf("InFlight, Limit = %v, want [1 2]: the second release of one request counts for nothing", got)
	}
	other(http.StatusTooManyRequests)
	if got := []int{l.InFlight(), l.Limit()}; !cmp.Equal(got, []int{0, 1}) {
		t.Errorf("InFlight, Limit = %v, want [0 1]", got)
	}
}

func TestLimitersShareOneLimiterPerOrigin(t *testing.T) {
	ls, err := webhooks.NewLimiters(webhooks.LimiterConfig{Max: 4})
	if err != nil {
		t.Fatal(err)
	}
	get := func(u string) *webhooks.Limiter {
		l, err := ls.For(u)
		if err != nil {
			t.Fatalf("For(%q): %v", u, err)
		}
		return l
	}
	a := get("http://Hooks.Example.com/orders?x=1")
	if b := get("HTTP://hooks.example.com:80/payments"); a != b {
		t.Error("two URLs of one origin got different limiters")
	}
	for _, other := range []string{"https://hooks.example.com/orders", "http://hooks.example.com:8080/orders", "http://other.example.com/orders"} {
		if get(other) == a {
			t.Errorf("%s shares the limiter of http://hooks.example.com", other)
		}
	}
	if _, err := ls.For("ftp://hooks.example.com/"); !errors.Is(err, webhooks.ErrInvalidURL) {
		t.Errorf("For(ftp) = %v, want ErrInvalidURL", err)
	}
	release := acquire(t, a)
	defer release(http.StatusOK)
	want := []webhooks.LimiterStats{
		{Origin: "http://hooks.example.com:80", Limit: 4, InFlight: 1},
		{Origin: "http://hooks.example.com:8080", Limit: 4},
		{Origin: "http://other.example.com:80", Limit: 4},
		{Origin: "https://hooks.example.com:443", Limit: 4},
	}
	if diff := cmp.Diff(want, ls.Stats()); diff != "" {
		t.Errorf("Stats (-want +got):\n%s", diff)
	}
}

// For remembers the limiter of each URL it saw; past that memory's bound
// a URL seen again must still get its origin's limiter.
func TestLimitersKeepOneLimiterPerOriginPastTheURLsTheyRemember(t *testing.T) {
	ls, err := webhooks.NewLimiters(webhooks.LimiterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := ls.For("http://hooks.example.com/0")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10000 {
		for _, u := range []string{"http://hooks.example.com/" + strconv.Itoa(i), "http://hooks.example.com/0"} {
			l, err := ls.For(u)
			if err != nil {
				t.Fatalf("For(%q): %v", u, err)
			}
			if l != first {
				t.Fatalf("For(%q) after %d URLs: another limiter than its origin's", u, i)
			}
		}
	}
	if got := len(ls.Stats()); got != 1 {
		t.Errorf("%d limiters, want 1 for one origin", got)
	}
}

func TestOriginNormalisesSchemeHostAndPort(t *testing.T) {
	tests := map[string]string{
		"https://Example.COM/a/b?c=d": "https://example.com:443",
		"http://example.com":          "http://example.com:80",
		"http://example.com:8080/x":   "http://example.com:8080",
		"https://[2001:DB8::1]/hook":  "https://[2001:db8::1]:443",
		"http://127.0.0.1:9000/hook":  "http://127.0.0.1:9000",
		"https://user@example.com/x":  "https://example.com:443",
	}
	for in, want := range tests {
		got, err := webhooks.Origin(in)
		if err != nil || got != want {
			t.Errorf("Origin(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"ftp://example.com", "/relative", "http://", "http://%zz"} {
		if _, err := webhooks.Origin(bad); !errors.Is(err, webhooks.ErrInvalidURL) {
			t.Errorf("Origin(%q) = %v, want ErrInvalidURL", bad, err)
		}
	}
}

func TestNewLimitersRejectsANegativeMax(t *testing.T) {
	if _, err := webhooks.NewLimiters(webhooks.LimiterConfig{Max: -1}); err == nil {
		t.Error("NewLimiters(Max -1) = nil error")
	}
}

// throttlingEndpoint answers 429 to any request beyond capacity concurrent
// ones while throttling is on, as a FaaS platform at its concurrency quota
// does; admitted requests take a little time so concurrency builds up.
type throttlingEndpoint struct {
	*httptest.Server
	capacity   int32
	throttling atomic.Bool
	active     atomic.Int32
}

func newThrottlingEndpoint(t *testing.T, capacity int32) *throttlingEndpoint {
	t.Helper()
	e := &throttlingEndpoint{capacity: capacity}
	e.throttling.Store(true)
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := e.active.Add(1)
		defer e.active.Add(-1)
		if e.throttling.Load() && n > e.capacity {
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		time.Sleep(2 * time.Millisecond)
	}))
	t.Cleanup(e.Close)
	return e
}

func TestLimiterSettlesNearWhatAThrottlingEndpointTakesAndRecovers(t *testing.T) {
	const (
		capacity = 6  // the endpoint's concurrency quota
		limitMax = 24 // the operator's cap
		workers  = 32 // deliveries wanting to run at once
	)
	ep := newThrottlingEndpoint(t, capacity)
	limiters, err := webhooks.NewLimiters(webhooks.LimiterConfig{Max: limitMax})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, webhooks.ClientConfig{Limiters: limiters, MaxIdleConnsPerHost: workers})
	lim, err := limiters.For(ep.URL)
	if err != nil {
		t.Fatal(err)
	}

	// Phase 1 (throttling) ends after 600 successes; statistics cover the
	// last 400, once the limit had time to fall. Phase 2 (no throttling)
	// ends when the limit is back at its max.
	var (
		mu                  sync.Mutex
		phase               = 1
		ok, throttled       int
		steadyOK, steady429 int
		samples             []int
	)
	throttledDone, recovered := make(chan struct{}), make(chan struct{})
	record := func(status int) {
		mu.Lock()
		defer mu.Unlock()
		limit := lim.Limit()
		switch phase {
		case 1:
			if status == http.StatusTooManyRequests {
				throttled++
			} else {
				ok++
			}
			if ok > 200 {
				samples = append(samples, limit)
				if status == http.StatusTooManyRequests {
					steady429++
				} else {
					steadyOK++
				}
			}
			if ok == 600 {
				phase = 0 // wait for the test to turn throttling off
				close(throttledDone)
			}
		case 2:
			if limit == limitMax {
				phase = 0
				close(recovered)
			}
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				res := c.Deliver(ctx, &webhooks.Request{URL: ep.URL}, webhooks.RetryPolicy{MaxAttempts: 1}, nil)
				if res.Attempts == 1 {
					record(res.Last.Status)
				}
			}
		}()
	}
	stop := func() {
		cancel()
		wg.Wait()
	}
	defer stop()

	select {
	case <-throttledDone:
	case <-time.After(15 * time.Second):
		t.Fatalf("throttled phase did not finish: %d ok, %d throttled, limit %d", ok, throttled, lim.Limit())
	}
	mu.Lock()
	lo, hi, sum := samples[0], samples[0], 0
	for _, s := range samples {
		lo, hi, sum = min(lo, s), max(hi, s), sum+s
	}
	mean := float64(sum) / float64(len(samples))
	rate := float64(steady429) / float64(steady429+steadyOK)
	t.Logf("throttled: limit min %d max %d mean %.1f over %d samples; 429 rate %.2f after settling, %d 429s in all",
		lo, hi, mean, len(samples), rate, throttled)
	if mean < capacity/2 || mean > capacity+2 {
		t.Errorf("mean limit while throttled = %.1f, want near the endpoint's capacity %d", mean, capacity)
	}
	if lo < 1 || hi > 2*capacity {
		t.Errorf("limit ranged over [%d, %d] while throttled, want within [1, %d]", lo, hi, 2*capacity)
	}
	if rate > 0.2 {
		t.Errorf("429 rate after settling = %.2f, want under 0.2: %d workers at capacity %d would see ~0.8 unlimited", rate, workers, capacity)
	}
	ep.throttling.Store(false)
	phase = 2
	mu.Unlock()

	select {
	case <-recovered:
	case <-time.After(15 * time.Second):
		t.Fatalf("limit did not recover to %d once the endpoint stopped throttling; it is %d", limitMax, lim.Limit())
	}
	stop()
	if got := lim.InFlight(); got != 0 {
		t.Errorf("InFlight() = %d after every delivery ended, want 0", got)
	}
}

func TestDeliverWaitsForTheEndpointsSlotAndGivesUpWithItsContext(t *testing.T) {
	ep := newEndpoint(t, statuses(http.StatusOK))
	limiters, err := webhooks.NewLimiters(webhooks.LimiterConfig{Max: 1})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, webhooks.ClientConfig{Limiters: limiters})
	lim, _ := limiters.For(ep.URL)
	release := acquire(t, lim) // another subscription holds the only slot
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()

	res := c.Deliver(ctx, &webhooks.Request{URL: ep.URL + "/other-path"}, webhooks.RetryPolicy{}, nil)

	if res.Outcome != webhooks.OutcomeRetry || res.Attempts != 0 || !errors.Is(res.Err, context.DeadlineExceeded) {
		t.Fatalf("Deliver = {%s, %d attempts, %v}, want {retry, 0, deadline}: waiting is not failing", res.Outcome, res.Attempts, res.Err)
	}
	if n := len(ep.requests()); n != 0 {
		t.Errorf("endpoint saw %d requests while its only slot was held, want 0", n)
	}

	release(http.StatusOK)
	res = c.Deliver(context.Background(), &webhooks.Request{URL: ep.URL}, webhooks.RetryPolicy{}, nil)
	if res.Outcome != webhooks.OutcomeSuccess || lim.InFlight() != 0 {
		t.Errorf("Deliver after release = %s with %d in flight, want success and 0", res.Outcome, lim.InFlight())
	}
}

// The limiter's state is visible as gauges, one series per origin.
func TestLimiterMetricsShowEachOrigin(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	ls, err := webhooks.NewLimiters(webhooks.LimiterConfig{Max: 7})
	if err != nil {
		t.Fatal(err)
	}
	if err := webhooks.RegisterLimiterMetrics(mp.Meter("test"), ls); err != nil {
		t.Fatal(err)
	}
	l, err := ls.For("https://fn.example.com/hook")
	if err != nil {
		t.Fatal(err)
	}
	release, err := l.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer release(200)
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			for _, dp := range m.Data.(metricdata.Gauge[int64]).DataPoints {
				origin, _ := dp.Attributes.Value("server.address")
				got[m.Name+" "+origin.AsString()] = dp.Value
			}
		}
	}
	want := map[string]int64{
		"keyhook.endpoint.concurrency_limit https://fn.example.com:443": 7,
		"keyhook.endpoint.in_flight https://fn.example.com:443":         1,
		"keyhook.endpoint.waiting https://fn.example.com:443":           0,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("limiter gauges (-want +got):\n%s", diff)
	}
}

// Retries of one delivery that the endpoint keeps answering 503 do not
// lower the endpoint's limit: one failing record must not starve every
// other key sharing the endpoint.
func TestOneDeliveryRetryingDoesNotLowerTheLimit(t *testing.T) {
	srv, ls, c := limitedEndpoint(t, http.StatusServiceUnavailable, 64)
	res := c.Deliver(context.Background(), &webhooks.Request{URL: srv.URL}, webhooks.RetryPolicy{
		InitialInterval: time.Millisecond, MaxInterval: time.Millisecond, Multiplier: 1, RandomizationFactor: 1e-9, MaxAttempts: 8}, nil)
	if res.Attempts != 8 {
		t.Fatalf("attempts = %d, want 8", res.Attempts)
	}
	l, _ := ls.For(srv.URL)
	if got := l.Limit(); got != 64 {
		t.Errorf("after 8 throttled attempts of one delivery the limit is %d, want 64", got)
	}
}

// A Wait is a waiter like an Acquire call, in one arrival order, but
// without a goroutine: its slot comes through the function it left, on
// the goroutine that freed it; one withdrawn in time is never granted,
// and one withdrawn too late says so, its slot left to the caller.
func TestLimiterWaitIsServedInArrivalOrderWithAcquireAndCanBeWithdrawn(t *testing.T) {
	l := newLimiter(t, 1)
	release := acquire(t, l)
	if _, ok := l.TryAcquire(); ok {
		t.Fatal("TryAcquire took a slot of a full limiter")
	}

	var mu sync.Mutex
	var order []string
	granted := make(map[string]webhooks.Slot)
	grant := func(name string) func(webhooks.Slot) {
		return func(s webhooks.Slot) {
			mu.Lock()
			defer mu.Unlock()
			order = append(order, name)
			granted[name] = s
		}
	}
	cancelFirst := l.Wait(grant("first wait"))
	// An Acquire behind it, then a Wait that will withdraw, then another.
	acquired := make(chan func(int))
	go func() { acquired <- acquire(t, l) }()
	for l.Waiting() < 2 {
		time.Sleep(time.Millisecond)
	}
	cancelLeaver := l.Wait(grant("leaver"))
	cancelLast := l.Wait(grant("last wait"))
	if n := l.Waiting(); n != 4 {
		t.Fatalf("Waiting() = %d, want 4 (two waits, an Acquire, a wait)", n)
	}
	if !cancelLeaver() {
		t.Fatal("withdrawing a wait not granted yet reported it granted")
	}
	if _, ok := l.TryAcquire(); ok {
		t.Fatal("TryAcquire jumped the queue of waiters")
	}

	release(http.StatusOK) // to the first wait, on this goroutine
	mu.Lock()
	first, ok := granted["first wait"]
	mu.Unlock()
	if !ok {
		t.Fatal("releasing the slot did not grant the oldest wait before returning")
	}
	if cancelFirst() {
		t.Fatal("withdrawing a granted wait reported it withdrawn: its slot would leak")
	}
	first.Release(http.StatusOK) // to the Acquire
	second := <-acquired
	second(http.StatusOK) // to the last wait, the leaver skipped
	mu.Lock()
	last := granted["last wait"]
	got := append([]string(nil), order...)
	mu.Unlock()
	if diff := cmp.Diff([]string{"first wait", "last wait"}, got); diff != "" {
		t.Errorf("waits granted (-want +got):\n%s", diff)
	}
	if cancelLast() {
		t.Error("withdrawing the granted last wait reported it withdrawn")
	}
	if !last.Held() {
		t.Fatal("the granted slot holds nothing")
	}
	last.Release(http.StatusOK)
	last.Release(http.StatusOK)
	if last.Held() {
		t.Error("a released slot still reports held")
	}
	if n := l.InFlight(); n != 0 {
		t.Errorf("InFlight() = %d, want 0: a slot released twice counts once, and the leaver holds none", n)
	}
	s, ok := l.TryAcquire()
	if !ok {
		t.Fatal("TryAcquire found no slot in an idle limiter")
	}
	s.Release(0)
}

// A Wait on a limiter with a slot free and nobody waiting is granted at
// once, before Wait returns.
func TestLimiterWaitWithASlotFreeIsGrantedAtOnce(t *testing.T) {
	l := newLimiter(t, 2)
	var s webhooks.Slot
	cancel := l.Wait(func(g webhooks.Slot) { s = g })
	if !s.Held() {
		t.Fatal("Wait on an idle limiter did not grant a slot before returning")
	}
	if cancel() {
		t.Error("withdrawing a wait granted at once reported it withdrawn")
	}
	if n := l.InFlight(); n != 1 {
		t.Errorf("InFlight() = %d, want 1", n)
	}
	s.Release(0)
}

// AttemptIn spends the caller's slot as Attempt spends its own: it gives
// it back with the answer, two first attempts answered 429 halve the
// limit, and a retry answered 429 does not count.
func TestAttemptInGivesItsSlotBackWithTheAnswer(t *testing.T) {
	srv, ls, c := limitedEndpoint(t, http.StatusTooManyRequests, 8)
	l := c.Limiter(srv.URL)
	if l == nil {
		t.Fatal("Limiter(endpoint) = nil with Limiters configured")
	}
	if other, _ := ls.For(srv.URL + "/other"); other != l {
		t.Fatal("Limiter(endpoint) is not the limiter of its origin that Attempt waits on")
	}
	take := func() *webhooks.Slot {
		s, ok := l.TryAcquire()
		if !ok {
			t.Fatal("TryAcquire found no slot")
		}
		return &s
	}
	a, b, retry := take(), take(), take()
	c.AttemptIn(context.Background(), &webhooks.Request{URL: srv.URL}, 2, retry)
	if retry.Held() || l.InFlight() != 2 || l.Limit() != 8 {
		t.Fatalf("after a retry answered 429: held %v, InFlight %d, Limit %d; want the slot back and the limit 8", retry.Held(), l.InFlight(), l.Limit())
	}
	c.AttemptIn(context.Background(), &webhooks.Request{URL: srv.URL}, 1, a)
	c.AttemptIn(context.Background(), &webhooks.Request{URL: srv.URL}, 1, b)
	if got := []int{l.InFlight(), l.Limit()}; !cmp.Equal(got, []int{0, 1}) {
		t.Errorf("after two first attempts answered 429, InFlight, Limit = %v, want [0 1] (halved from the 3 at once, floored)", got)
	}

	plain, err := webhooks.NewClient(webhooks.ClientConfig{Policy: webhooks.AddressPolicy{AllowPrivate: true}})
	if err != nil {
		t.Fatal(err)
	}
	if plain.Limiter(srv.URL) != nil {
		t.Error("Limiter(endpoint) is not nil without Limiters")
	}
}
