package dispatcher_test

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
)

// A record waiting for its retry holds no delivery slot: with
// max_in_flight 4 and 4 keys answered 503 forever, the other keys' records
// flow as if the failing keys were not there, and the gauges say what
// happens (4 deliveries waiting to retry, never more than 4 attempts in
// flight).
func TestRetryingKeysHoldNoDeliverySlot(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) {
			topic := uniqueTopic(t, "slots")
			// One failing key on each of partitions 0-3, the healthy keys
			// on partition 4: batches never mix the two.
			brokers := testutil.Kfake(t, 5, topic)
			rdb := testutil.StartRedis(t).Client()
			const failing, healthy, maxInFlight = 4, 200, 4

			sink := testutil.StartSink(t)
			sink.Status = func(d *testutil.Delivery) int {
				if len(d.Key) > 4 && d.Key[:4] == "bad-" {
					return http.StatusServiceUnavailable
				}
				return http.StatusOK
			}
			keyOf := func(i int) string {
				if i < failing {
					return fmt.Sprintf("bad-%d", i)
				}
				return fmt.Sprintf("key-%d", i%50)
			}
			partOf := func(i int) int32 { return int32(min(i, failing)) }
			produce(t, brokers, topic, failing+healthy, keyOf, partOf)

			sub := newSub("slots-"+topic, topic, sink.URL, subscription.OrderKey, maxInFlight)
			// Waits far longer than an attempt: a slot held through them
			// would be held nearly all the time.
			sub.Retry = subscription.RetryPolicy{InitialIntervalMS: 1000, MaxIntervalMS: 2000}
			if batched {
				sub.Batch = subscription.Batch{MaxRecords: 10}
			}
			h := startNode(t, brokers, rdb, []*subscription.Subscription{sub}, nil)

			started := time.Now()
			deadline := started.Add(15 * time.Second)
			var peak int64
			for sink.AckedCount() < healthy && time.Now().Before(deadline) {
				for _, g := range h.node.Stats() {
					peak = max(peak, g.InFlight)
				}
				time.Sleep(10 * time.Millisecond)
			}
			got := sink.AckedCount()
			t.Logf("%d of %d healthy records delivered in %v beside %d keys retrying, max_in_flight %d",
				got, healthy, time.Since(started).Round(time.Millisecond), failing, maxInFlight)
			if got < healthy {
				t.Fatalf("%d of %d healthy records delivered within 15s: retrying keys hold the slots", got, healthy)
			}
			if peak > maxInFlight {
				t.Errorf("in flight peaked at %d, want <= max_in_flight %d", peak, maxInFlight)
			}
			// Between their attempts the failing keys wait off the slots,
			// and the retrying gauge counts them.
			var retrying int64
			for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
				retrying = 0
				for _, g := range h.node.Stats() {
					retrying += g.Retrying
				}
				if retrying == failing {
					break
				}
			}
			if retrying != failing {
				t.Errorf("retrying gauge = %d, want %d (the failing keys)", retrying, failing)
			}
		})
	}
}

// A graceful handover never sends a record twice: an attempt in flight
// when the drain deadline passes runs to its own timeout (the request
// timeout, longer than the drain), is acked and committed, and the next
// owner does not send it again.
func TestGracefulHandoverLetsTheAttemptInFlightFinish(t *testing.T) {
	topic := uniqueTopic(t, "handover")
	brokers := testutil.Kfake(t, 1, topic)
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	var slowSent atomic.Int32 // requests received, answered or not
	sink.Latency = func(d *testutil.Delivery) time.Duration {
		if d.Key == "slow" {
			slowSent.Add(1)
			return 3 * time.Second
		}
		return 0
	}
	keyOf := func(i int) string {
		if i == 0 {
			return "slow"
		}
		return fmt.Sprintf("key-%d", i)
	}
	ends := produce(t, brokers, topic, 20, keyOf, func(int) int32 { return 0 })
	sub := newSub("handover-"+topic, topic, sink.URL, subscription.OrderKey, 8)
	sub.Endpoint.TimeoutMS = 10000 // the request timeout, longer than the drain
	drain := func(c *dispatcher.Config) { c.DrainTimeout = time.Second }

	first := startNode(t, brokers, rdb, []*subscription.Subscription{sub}, drain)
	sink.WaitAcked(t, 19, 30*time.Second) // everything but the slow record
	for sink.InFlight() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	stopped := time.Now()
	first.stop(t)
	t.Logf("graceful stop took %v with a 3s request in flight and a 1s drain timeout", time.Since(stopped).Round(time.Millisecond))
	if !sink.Acked(testutil.TP{Topic: topic, Partition: 0}, 0) {
		t.Fatalf("the slow record was not acked by the stop: its attempt was cut at the drain deadline")
	}
	waitCommitted(t, newAdmin(t, brokers), sub.GroupID(), ends, 10*time.Second)

	second := startNode(t, brokers, rdb, []*subscription.Subscription{sub}, drain)
	// Give the next owner time to claim and to send anything it thought
	// pending.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		claimed := false
		for _, g := range second.node.Stats() {
			for _, p := range g.Partitions {
				claimed = claimed || p.Claimed
			}
		}
		if claimed {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	second.stop(t)
	sent := slowSent.Load()
	if sent != 1 || sink.Duplicates() != 0 {
		t.Fatalf("the slow record was sent %d times (duplicates %d), want once", sent, sink.Duplicates())
	}
}
