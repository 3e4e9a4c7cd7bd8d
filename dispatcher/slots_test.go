package dispatcher_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
	"github.com/keyhook/keyhook/webhooks"
)

// A record waiting for its retry holds no delivery slot: with
// max_in_flight 4 and 4 keys answered 503 forever, the other keys' records
// flow as if the failing keys were not there, and the gauges say what
// happens (4 deliveries waiting to retry, never more than 4 attempts in
// flight).
func TestRetryingKeysHoldNoDeliverySlot(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) {
			topic := testutil.UniqueTopic("slots")
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

			sub := newSub("slots-"+topic, topic, sink.URL, subscription.OrderKey, maxInFlight)
			// Waits far longer than an attempt: a slot held through them
			// would be held nearly all the time.
			sub.Retry = subscription.RetryPolicy{InitialIntervalMS: 1000, MaxIntervalMS: 2000}
			if batched {
				sub.Batch = subscription.Batch{MaxRecords: 10}
			}
			h := startNode(t, brokers, rdb, []*subscription.Subscription{sub}, nil)

			// The failing keys go first and are retrying before the
			// healthy records arrive: they had the slots first.
			produce(t, brokers, topic, failing, keyOf, partOf)
			for end := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				seen := map[string]bool{}
				for _, d := range sink.Deliveries() {
					seen[d.Key] = true
				}
				if len(seen) == failing {
					break
				}
				if time.Now().After(end) {
					t.Fatalf("the failing keys were not all tried within 30s: %v", seen)
				}
			}
			produce(t, brokers, topic, healthy, func(i int) string { return keyOf(failing + i) }, func(int) int32 { return failing })

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
	topic := testutil.UniqueTopic("handover")
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
		t.Errorf("the slow record was not acked by the stop: its attempt was cut at the drain deadline")
	}
	// The stop commits what it acked before it returns.
	if got, err := testutil.Committed(t.Context(), testutil.Admin(t, brokers), sub.GroupID()); err != nil || got[0] != ends[0] {
		t.Errorf("committed after the stop = %v (err %v), want %v", got, err, ends)
	}

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
	// Long enough for a resend of the slow record to reach the sink.
	time.Sleep(time.Second)
	second.stop(t)
	sent := slowSent.Load()
	if sent != 1 || sink.Duplicates() != 0 {
		t.Fatalf("the slow record was sent %d times (duplicates %d), want once", sent, sink.Duplicates())
	}
}

// A drain ends a delivery waiting for its retry at once, without another
// attempt: the stop does not wait out the drain timeout for it, and the
// record stays pending for the next owner.
func TestDrainReleasesRetryingRecordsAtOnce(t *testing.T) {
	topic := testutil.UniqueTopic("drain-retry")
	brokers := testutil.Kfake(t, 1, topic)
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	var attempts atomic.Int32
	sink.Status = func(d *testutil.Delivery) int {
		attempts.Add(1)
		return http.StatusServiceUnavailable
	}
	ends := produce(t, brokers, topic, 1, func(int) string { return "failing" }, func(int) int32 { return 0 })
	sub := newSub("drain-retry-"+topic, topic, sink.URL, subscription.OrderKey, 4)
	sub.Retry = subscription.RetryPolicy{InitialIntervalMS: 10000, MaxIntervalMS: 10000}
	const drain = 5 * time.Second
	h := startNode(t, brokers, rdb, []*subscription.Subscription{sub}, func(c *dispatcher.Config) { c.DrainTimeout = drain })
	for attempts.Load() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	// The first attempt is answered; the record now waits 10s for its
	// retry.
	for len(sink.Deliveries()) == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	stopped := time.Now()
	h.stop(t)
	took := time.Since(stopped)
	t.Logf("graceful stop took %v with a record waiting for its retry and a %v drain timeout", took.Round(time.Millisecond), drain)
	if took >= drain {
		t.Errorf("the stop waited %v for a record waiting for its retry, want it released at once", took)
	}
	if n := attempts.Load(); n != 1 {
		t.Errorf("the endpoint saw %d attempts, want 1: the drain made another", n)
	}
	if got, err := testutil.Committed(t.Context(), testutil.Admin(t, brokers), sub.GroupID()); err != nil || got[0] >= ends[0] {
		t.Errorf("committed after the stop = %v (err %v), want below %v: the record is not acked", got, err, ends)
	}
}

// A record whose attempt fails while its partition drains gets no retry
// either: the drain does not wait for its next attempt, nor does the next
// owner see the retry twice.
func TestDrainReleasesARecordWhoseAttemptFailsDuringIt(t *testing.T) {
	topic := testutil.UniqueTopic("drain-fail")
	brokers := testutil.Kfake(t, 1, topic)
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	var attempts atomic.Int32
	started, release := make(chan struct{}), make(chan struct{})
	sink.Status = func(d *testutil.Delivery) int {
		if attempts.Add(1) == 1 {
			close(started)
			<-release
		}
		return http.StatusServiceUnavailable
	}
	ends := produce(t, brokers, topic, 1, func(int) string { return "failing" }, func(int) int32 { return 0 })
	sub := newSub("drain-fail-"+topic, topic, sink.URL, subscription.OrderKey, 4)
	sub.Retry = subscription.RetryPolicy{InitialIntervalMS: 10000, MaxIntervalMS: 10000}
	const drain = 5 * time.Second
	h := startNode(t, brokers, rdb, []*subscription.Subscription{sub}, func(c *dispatcher.Config) { c.DrainTimeout = drain })
	<-started
	// The attempt fails once the drain began.
	time.AfterFunc(500*time.Millisecond, func() { close(release) })
	stopped := time.Now()
	h.stop(t)
	took := time.Since(stopped)
	t.Logf("graceful stop took %v with an attempt failing during the drain and a %v drain timeout", took.Round(time.Millisecond), drain)
	if took >= drain {
		t.Errorf("the stop waited %v for the retry of an attempt that failed during the drain, want it released at once", took)
	}
	if n := attempts.Load(); n != 1 {
		t.Errorf("the endpoint saw %d attempts, want 1: the drain made another", n)
	}
	if got, err := testutil.Committed(t.Context(), testutil.Admin(t, brokers), sub.GroupID()); err != nil || got[0] >= ends[0] {
		t.Errorf("committed after the stop = %v (err %v), want below %v: the record is not acked", got, err, ends)
	}
}

// stuckSender's attempts never end on their own: each waits for its
// context, as one queued at a saturated endpoint limiter does.
type stuckSender struct{ started chan struct{} }

func (s stuckSender) Attempt(ctx context.Context, _ *webhooks.Request, n int) (webhooks.Attempt, error) {
	select {
	case s.started <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return webhooks.Attempt{}, ctx.Err()
}

func (s stuckSender) Deliver(ctx context.Context, r *webhooks.Request, _ webhooks.RetryPolicy, _ func(webhooks.Attempt)) webhooks.Result {
	_, err := s.Attempt(ctx, r, 1)
	return webhooks.Result{Outcome: webhooks.OutcomeRetry, Err: err}
}

// A drain waits for attempts in flight past its deadline, but not forever:
// one still running a request timeout later is cut, and the stop ends.
func TestDrainCutsAttemptsARequestTimeoutPastItsDeadline(t *testing.T) {
	topic := testutil.UniqueTopic("drain-cut")
	brokers := testutil.Kfake(t, 1, topic)
	tracker, err := tracking.New(testutil.StartRedis(t).Client(), tracking.Config{})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, brokers, topic, 1, func(int) string { return "k" }, func(int) int32 { return 0 })
	sub := newSub("drain-cut-"+topic, topic, "http://127.0.0.1:1/hook", subscription.OrderKey, 4)
	const drain, request = 200 * time.Millisecond, 300 * time.Millisecond
	sender := stuckSender{started: make(chan struct{}, 1)}
	n, err := dispatcher.New(dispatcher.Config{
		NodeID: "drain-cut", Brokers: brokers,
		Tuning: dispatcher.Tuning{SessionTimeout: 6 * time.Second, DrainTimeout: drain, RequestTimeout: request},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	}, staticSubs{sub}, sender, tracker)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	select {
	case <-sender.started:
	case <-time.After(30 * time.Second):
		t.Fatal("no attempt started within 30s")
	}
	stopped := time.Now()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the stop did not end within 10s: the drain waits forever for a stuck attempt")
	}
	took := time.Since(stopped)
	t.Logf("stop took %v with a stuck attempt, drain %v, request timeout %v", took.Round(time.Millisecond), drain, request)
	if took < drain+request {
		t.Errorf("the stop took %v, want the attempt left its request timeout past the drain (%v)", took, drain+request)
	}
}
