package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/keyhook/keyhook/breaker"
	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/ratelimit"
	"github.com/keyhook/keyhook/subscription"
)

// requestsPerSecond counts the requests the sink saw in each one-second window
// from the first.
func requestsPerSecond(ds []testutil.Delivery) []int {
	if len(ds) == 0 {
		return nil
	}
	t0 := ds[0].Start
	for _, d := range ds {
		if d.Start.Before(t0) {
			t0 = d.Start
		}
	}
	var out []int
	for _, d := range ds {
		i := int(d.Start.Sub(t0) / time.Second)
		for len(out) <= i {
			out = append(out, 0)
		}
		out[i]++
	}
	return out
}

// A subscription's rate limit holds over three nodes together: in no
// one-second window after the first does the endpoint see more than
// per_second × 1.1 requests, every record is delivered once, each key in
// order, and the commit reaches the log end.
func TestRateLimitHoldsAcrossNodes(t *testing.T) {
	testutil.KafkaTiers(t, 6, []string{"limited"}, func(t *testing.T, brokers []string) {
		topic := "limited"
		if !strings.HasSuffix(t.Name(), "/kfake") {
			topic = testutil.UniqueTopic("limited")
			testutil.CreateTopics(t, brokers, 6, topic)
		}
		rdb := testutil.StartRedis(t).Client()
		tokens, err := ratelimit.New(rdb, "")
		if err != nil {
			t.Fatal(err)
		}
		sink := testutil.StartSink(t)
		const n, rate = 400, 50
		ends := produce(t, brokers, topic, n, func(i int) string { return fmt.Sprintf("k%d", i%60) }, func(i int) int32 { return int32(i % 6) })
		sub := newSub("limited", topic, sink.URL, subscription.OrderKey, 64)
		sub.RateLimit = subscription.RateLimit{PerSecond: rate}
		for range 3 {
			startNode(t, brokers, rdb, []*subscription.Subscription{sub}, func(c *dispatcher.Config) { c.RateTokens = tokens })
		}
		sink.WaitAcked(t, n, time.Minute)
		testutil.WaitCommitted(t, testutil.Admin(t, brokers), sub.GroupID(), ends, 30*time.Second)
		windows := requestsPerSecond(sink.Deliveries())
		t.Logf("requests per second: %v", windows)
		for i, c := range windows[1:] {
			if float64(c) > rate*1.1 {
				t.Errorf("window %d saw %d requests, above %d × 1.1", i+1, c, rate)
			}
		}
		// 400 records at 50/s take 7 s and more: less is no limit at all.
		if len(windows) < n/rate-1 {
			t.Errorf("%d records delivered within %d windows: the limit did not hold them back", n, len(windows))
		}
		checkDelivered(t, sink, topic, ends)
		if v := sink.KeyOrderViolations(); len(v) > 0 {
			t.Errorf("%d per-key order violations, first: %s", len(v), v[0])
		}
		if d := sink.Duplicates(); d != 0 {
			t.Errorf("%d duplicates, want 0", d)
		}
	})
}

// Keys take turns under a rate limit: a hot key whose records came first
// does not starve the others; each of them goes before the hot key's
// records are half through.
func TestRateLimitedKeysTakeTurns(t *testing.T) {
	brokers := testutil.Kfake(t, 1, "turns")
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	const hot, cold, rate = 60, 20, 40
	// The hot key's records first, then one record of each cold key.
	ends := produce(t, brokers, "turns", hot+cold, func(i int) string {
		if i < hot {
			return "hot"
		}
		return fmt.Sprintf("cold%d", i)
	}, func(int) int32 { return 0 })
	sub := newSub("turns", "turns", sink.URL, subscription.OrderKey, 64)
	sub.RateLimit = subscription.RateLimit{PerSecond: rate}
	startNode(t, brokers, rdb, []*subscription.Subscription{sub}, nil)
	sink.WaitAcked(t, hot+cold, time.Minute)
	var hotBefore []int
	seen := 0
	for _, d := range sink.Deliveries() {
		if d.Key == "hot" {
			seen++
			continue
		}
		hotBefore = append(hotBefore, seen)
	}
	if len(hotBefore) != cold || slices.Max(hotBefore) > hot/2 {
		t.Errorf("hot records delivered before each cold key: %v; want every cold key before %d of the hot key's", hotBefore, hot/2)
	}
	checkDelivered(t, sink, "turns", ends)
	if v := sink.KeyOrderViolations(); len(v) > 0 {
		t.Errorf("per-key order violations: %v", v)
	}
}

// An endpoint that is down opens its origin's breaker: from then on at
// most one request per interval reaches it (the probe), the attempt
// numbers the endpoint sees advance only by the requests it got, another
// origin's deliveries go on meanwhile, and once it is back everything is
// delivered within two intervals, in key order.
func TestBreakerHoldsADownEndpointToOneProbePerInterval(t *testing.T) {
	brokers := testutil.Kfake(t, 1, "down", "up")
	rdb := testutil.StartRedis(t).Client()
	down, up := testutil.StartSink(t), testutil.StartSink(t)
	var recovered atomicTime
	down.Status = func(*testutil.Delivery) int {
		if recovered.set() {
			return http.StatusOK
		}
		return http.StatusServiceUnavailable
	}
	const keys, failures, interval = 50, 5, 500 * time.Millisecond
	key := func(i int) string { return fmt.Sprintf("k%d", i%keys) }
	ends := produce(t, brokers, "down", 2*keys, key, func(int) int32 { return 0 })
	sdown := newSub("down", "down", down.URL, subscription.OrderKey, 16)
	sup := newSub("up", "up", up.URL, subscription.OrderKey, 16)
	reader := sdkmetric.NewManualReader()
	var logs syncBuffer
	// The node logs here, to count its transitions: shown when the test
	// fails, where they say what the breaker did.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the node's log:\n%s", logs.String())
		}
	})
	var transitions atomic.Int64
	h := startNode(t, brokers, rdb, []*subscription.Subscription{sdown, sup}, func(c *dispatcher.Config) {
		c.BreakerFailures, c.BreakerInterval = failures, interval
		c.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		c.OnBreakerTransition = func(breaker.Transition) { transitions.Add(1) }
	})
	testutil.WaitFor(t, 30*time.Second, "the breaker open", func() bool { return len(down.Deliveries()) >= failures })
	time.Sleep(interval) // attempts in flight when it opened are answered
	opened := time.Now()
	// Woken at each half-open, the waiting deliveries queue again at once.
	testutil.WaitFor(t, 2*time.Second, "the node's breaker listed with deliveries waiting", func() bool {
		bs := h.node.Breakers()
		return len(bs) == 1 && strings.HasPrefix(down.URL, bs[0].Origin) && bs[0].Waiting > 0
	})
	if st := testutil.Int64Metric(t, reader, "keyhook.breaker.state"); st < int64(breaker.HalfOpen) {
		t.Errorf("keyhook.breaker.state = %d while the endpoint is down, want half-open (1) or open (2)", st)
	}
	upEnds := produce(t, brokers, "up", 100, key, func(int) int32 { return 0 })
	const outage = 4 * time.Second
	time.Sleep(outage)
	during := 0
	for _, d := range down.Deliveries() {
		if d.Start.After(opened) {
			during++
		}
	}
	if max := int(outage/interval) + 1; during > max {
		t.Errorf("%d requests reached the down endpoint in %v with the breaker open, want at most one per %v (%d)", during, outage, interval, max)
	}
	if during == 0 {
		t.Error("no probe reached the down endpoint while its breaker was open")
	}
	if up.AckedCount() != 100 {
		t.Errorf("the other origin got %d of 100 records during the outage", up.AckedCount())
	}
	checkDelivered(t, up, "up", upEnds)

	recovered.store(time.Now())
	down.WaitAcked(t, 2*keys, 30*time.Second)
	var firstOK, lastOK time.Time
	attempts := make(map[int64][]int)
	for _, d := range down.Deliveries() {
		attempts[d.Offset] = append(attempts[d.Offset], d.Attempt)
		if d.Status == http.StatusOK {
			if firstOK.IsZero() {
				firstOK = d.Start
			}
			lastOK = d.End
		}
	}
	if wait := firstOK.Sub(recovered.load()); wait > 2*interval {
		t.Errorf("first delivery %v after the endpoint recovered, want within two intervals (%v)", wait, 2*interval)
	}
	t.Logf("recovered: first 2xx after %v, all %d delivered after %v; %d requests during %v open",
		firstOK.Sub(recovered.load()).Round(time.Millisecond), 2*keys, lastOK.Sub(recovered.load()).Round(time.Millisecond), during, outage)
	for off, as := range attempts {
		for i, a := range as {
			if a != i+1 {
				t.Fatalf("offset %d: the endpoint saw attempts %v; an attempt number was spent without a request", off, as)
			}
		}
	}
	checkDelivered(t, down, "down", ends)
	// Every transition is logged once, counted once, and told to the hook:
	// each open is followed by one half-open, the last by the close.
	opens := int64(strings.Count(logs.String(), `msg="circuit breaker open"`))
	closes := int64(strings.Count(logs.String(), `msg="circuit breaker closed"`))
	counted := testutil.Int64Metric(t, reader, "keyhook.breaker.transitions")
	if closes != 1 || opens < 1 || counted != transitions.Load() || counted != 2*opens+closes {
		t.Errorf("%d open and %d closed log lines, %d transitions counted, %d told to the hook; want one line per transition (open, half-open per probe, one close)", opens, closes, counted, transitions.Load())
	}
	if v := down.KeyOrderViolations(); len(v) > 0 {
		t.Errorf("per-key order violations: %v", v)
	}
	if d := down.Duplicates(); d != 0 {
		t.Errorf("%d duplicates", d)
	}
}

// atomicTime is a time set once by the test and read by a sink's handler.
type atomicTime struct{ v atomic.Int64 }

func (a *atomicTime) store(t time.Time) { a.v.Store(t.UnixNano()) }
func (a *atomicTime) set() bool         { return a.v.Load() != 0 }
func (a *atomicTime) load() time.Time   { return time.Unix(0, a.v.Load()) }

// failingTokens is a shared limit that never answers.
type failingTokens struct{ calls atomic.Int64 }

func (f *failingTokens) Take(context.Context, string, subscription.RateLimit, int) (int, time.Duration, error) {
	f.calls.Add(1)
	return 0, 0, errors.New("redis: connection refused")
}

// When the shared limit fails, a node neither stops nor runs unlimited:
// it limits to its share of the rate (all of it, alone), and asks the
// shared limit again now and then, not per token.
func TestRateLimitFallsBackToTheNodesShareWhenTokensFail(t *testing.T) {
	brokers := testutil.Kfake(t, 1, "fallback")
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	const n, rate = 90, 30
	ends := produce(t, brokers, "fallback", n, func(i int) string { return fmt.Sprintf("k%d", i%9) }, func(int) int32 { return 0 })
	sub := newSub("fallback", "fallback", sink.URL, subscription.OrderKey, 16)
	sub.RateLimit = subscription.RateLimit{PerSecond: rate}
	tokens := &failingTokens{}
	startNode(t, brokers, rdb, []*subscription.Subscription{sub}, func(c *dispatcher.Config) { c.RateTokens = tokens })
	sink.WaitAcked(t, n, 30*time.Second)
	windows := requestsPerSecond(sink.Deliveries())
	t.Logf("requests per second: %v; the shared limit asked %d times", windows, tokens.calls.Load())
	for i, c := range windows[1:] {
		if float64(c) > rate*1.1 {
			t.Errorf("window %d saw %d requests without the shared limit, above the node's share %d × 1.1", i+1, c, rate)
		}
	}
	if c := tokens.calls.Load(); c > int64(len(windows))+2 {
		t.Errorf("the failing shared limit was asked %d times in %d s, want about once a second", c, len(windows))
	}
	checkDelivered(t, sink, "fallback", ends)
}

// Time a delivery waits behind an open breaker is not counted against its
// retry budget: with max_elapsed_ms far below the outage, no record is
// dead-lettered, every one is delivered once the endpoint is back.
func TestBreakerWaitSpendsNoRetryBudget(t *testing.T) {
	brokers := testutil.Kfake(t, 1, "budget")
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	var recovered atomicTime
	sink.Status = func(*testutil.Delivery) int {
		if recovered.set() {
			return http.StatusOK
		}
		return http.StatusServiceUnavailable
	}
	const n, interval = 20, 300 * time.Millisecond
	ends := produce(t, brokers, "budget", n, func(i int) string { return fmt.Sprintf("k%d", i) }, func(int) int32 { return 0 })
	sub := newSub("budget", "budget", sink.URL, subscription.OrderKey, 4)
	sub.DeadLetterTopic = "" // dead letters on: a spent budget would show
	sub.Retry.MaxElapsedMS = 1000
	h := startNode(t, brokers, rdb, []*subscription.Subscription{sub}, func(c *dispatcher.Config) {
		c.BreakerFailures, c.BreakerInterval = 2, interval
	})
	time.Sleep(3 * time.Second) // three budgets, ten probes
	recovered.store(time.Now())
	sink.WaitAcked(t, n, 30*time.Second)
	for _, g := range h.node.Stats() {
		if g.DeadLettered != 0 {
			t.Errorf("%d records dead-lettered: the wait behind the breaker spent their retry budget", g.DeadLettered)
		}
	}
	checkDelivered(t, sink, "budget", ends)
}
