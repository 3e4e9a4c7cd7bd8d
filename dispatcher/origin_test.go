package dispatcher_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
	"github.com/keyhook/keyhook/webhooks"
)

// originCapped starts a node whose endpoint origin takes cap requests at
// once (--endpoint-concurrency), delivering one subscription of
// max_in_flight 64 to a sink that answers nothing until open closes, and
// produces records of as many keys over 4 partitions; it returns once
// every free delivery slot has a delivery waiting for the origin. The
// sink opens at the latest when the test ends, before the node stops.
func originCapped(t *testing.T, records int) (h *nodeHandle, sink *testutil.Sink, lim *webhooks.Limiter, openSink func()) {
	t.Helper()
	const maxInFlight, origin = 64, 2
	topic := testutil.UniqueTopic("origin")
	brokers := testutil.Kfake(t, 4, topic)
	rdb := testutil.StartRedis(t).Client()
	open := make(chan struct{})
	openSink = sync.OnceFunc(func() { close(open) })
	sink = testutil.StartSink(t)
	sink.Latency = func(*testutil.Delivery) time.Duration { <-open; return 0 }
	ls, err := webhooks.NewLimiters(webhooks.LimiterConfig{Max: origin})
	if err != nil {
		t.Fatal(err)
	}
	sender, err := webhooks.NewClient(webhooks.ClientConfig{Policy: webhooks.AddressPolicy{AllowPrivate: true}, Timeout: 30 * time.Second, Limiters: ls})
	if err != nil {
		t.Fatal(err)
	}
	tracker, err := tracking.New(rdb, tracking.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sub := newSub("origin-"+topic, topic, sink.URL, subscription.OrderKey, maxInFlight)
	h = startNodeSending(t, brokers, tracker, staticSubs{sub}, nil, sender)
	t.Cleanup(openSink) // first: the node's stop waits for its attempts
	produce(t, brokers, topic, records, func(i int) string { return fmt.Sprintf("k-%d", i) }, func(i int) int32 { return int32(i % 4) })
	lim = sender.Limiter(sink.URL)
	testutil.WaitFor(t, 30*time.Second, "the origin's two slots at the endpoint, every other delivery slot waiting for the origin", func() bool {
		return lim.InFlight() == origin && lim.Waiting() == maxInFlight-origin && sink.InFlight() == origin
	})
	return h, sink, lim, openSink
}

// Deliveries waiting for a slot of their endpoint's origin (every
// subscription of the node pointing at it shares --endpoint-concurrency)
// are waiters of the origin's limiter, not goroutines parked in it: a
// thousand subscriptions behind one capped origin parked 41,000, 1.2 GB
// of stacks. They go in arrival order as slots free, and deliver every
// record once, in key order.
func TestDeliveriesWaitingForTheirOriginHoldNoGoroutine(t *testing.T) {
	const records = 200
	_, sink, lim, openSink := originCapped(t, records)
	// The two attempts in flight hold a goroutine each; the 62 waiting
	// hold none (a few may be between their wait and their attempt).
	if n := poolGoroutines(t); n > 4 {
		t.Fatalf("%d delivery goroutines with 2 attempts in flight and %d deliveries waiting for the origin, want at most 4: the waiting park goroutines", n, lim.Waiting())
	}
	openSink()
	sink.WaitAcked(t, records, 60*time.Second)
	testutil.WaitFor(t, 10*time.Second, "the origin's slots all given back", func() bool { return lim.InFlight() == 0 && lim.Waiting() == 0 })
	if d := sink.Duplicates(); d != 0 {
		t.Errorf("%d records delivered twice, want 0", d)
	}
	if v := sink.KeyOrderViolations(); len(v) > 0 {
		t.Errorf("key order violated: %v", v)
	}
}

// A node stopping withdraws its deliveries waiting for their origin at
// once, without the attempt they waited for, and leaves the origin's
// limiter as it found it: no slot kept, no waiter left behind.
func TestAStoppingNodeWithdrawsTheDeliveriesWaitingForTheirOrigin(t *testing.T) {
	h, sink, lim, openSink := originCapped(t, 200)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		h.stop(t)
	}()
	testutil.WaitFor(t, 10*time.Second, "the deliveries waiting for the origin withdrawn at the drain", func() bool { return lim.Waiting() == 0 })
	openSink() // the two attempts in flight end with their answer
	select {
	case <-stopped:
	case <-time.After(60 * time.Second):
		t.Fatal("the node did not stop")
	}
	if n := lim.InFlight(); n != 0 {
		t.Errorf("the stopped node keeps %d of its origin's slots, want 0", n)
	}
	if n := len(sink.Deliveries()); n > 2+4 {
		t.Errorf("%d requests reached the endpoint, want the 2 in flight at the stop (and a few granted as they ended): the withdrawn made their attempt", n)
	}
}
