package dispatcher_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyhook/keyhook/deadletter"
	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
)

// goroutinesIn counts the goroutines with a frame of any of funcs in
// their stack, from the goroutine profile.
func goroutinesIn(t *testing.T, funcs ...string) int {
	t.Helper()
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 2); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range strings.Split(b.String(), "\n\n") {
		if slices.ContainsFunc(funcs, func(f string) bool { return strings.Contains(g, f) }) {
			n++
		}
	}
	return n
}

// poolGoroutines counts the goroutines running in the delivery pool
// (any frame of dispatcher's pool).
func poolGoroutines(t *testing.T) int {
	t.Helper()
	return goroutinesIn(t, "keyhook/dispatcher.(*pool)")
}

// max_in_flight is a cap of attempts at once, not a pool of goroutines:
// under a backlog of distinct keys the endpoint never sees more requests
// at once than the cap, and sees the cap reached.
func TestMaxInFlightCapsConcurrentRequestsAtTheEndpoint(t *testing.T) {
	topic := testutil.UniqueTopic("cap")
	brokers := testutil.Kfake(t, 4, topic)
	rdb := testutil.StartRedis(t).Client()
	const maxInFlight, records = 3, 120
	var now, peak, served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := now.Add(1)
		for p := peak.Load(); c > p && !peak.CompareAndSwap(p, c); p = peak.Load() {
		}
		time.Sleep(5 * time.Millisecond)
		now.Add(-1)
		served.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	sub := newSub("cap-"+topic, topic, srv.URL, subscription.OrderKey, maxInFlight)
	h := startNode(t, brokers, rdb, []*subscription.Subscription{sub}, nil)
	defer h.stop(t)
	produce(t, brokers, topic, records, func(i int) string { return fmt.Sprintf("k-%d", i) }, func(i int) int32 { return int32(i % 4) })
	testutil.WaitFor(t, 30*time.Second, "every record delivered", func() bool { return served.Load() >= records })
	if p := peak.Load(); p > maxInFlight {
		t.Fatalf("the endpoint saw %d requests at once, want at most max_in_flight %d", p, maxInFlight)
	} else if p < 2 {
		t.Fatalf("the endpoint saw at most %d request at once under a backlog of %d keys: deliveries are serialised, not capped", p, records)
	}
}

// An idle subscription costs no delivery goroutine: they start for a
// delivery and end when nothing is due.
func TestIdleSubscriptionHasNoDeliveryGoroutine(t *testing.T) {
	topic := testutil.UniqueTopic("idle")
	brokers := testutil.Kfake(t, 2, topic)
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	sub := newSub("idle-"+topic, topic, sink.URL, subscription.OrderKey, 0) // the default, 256
	h := startNode(t, brokers, rdb, []*subscription.Subscription{sub}, nil)
	defer h.stop(t)
	testutil.WaitFor(t, 30*time.Second, "both partitions claimed", func() bool {
		claimed := 0
		for _, o := range h.node.Owned() {
			if o.Claimed {
				claimed++
			}
		}
		return claimed == 2
	})
	if n := poolGoroutines(t); n != 0 {
		t.Fatalf("%d delivery goroutines with nothing to deliver, want 0", n)
	}
	produce(t, brokers, topic, 50, func(i int) string { return fmt.Sprintf("k-%d", i) }, func(i int) int32 { return int32(i % 2) })
	testutil.WaitFor(t, 30*time.Second, "every record delivered", func() bool { return sink.AckedCount() >= 50 })
	testutil.WaitFor(t, 10*time.Second, "the delivery goroutines gone once idle again", func() bool { return poolGoroutines(t) == 0 })
}

// subscriptionGoroutines counts the goroutines that run a subscription's
// lifecycle on the node: its runner or its group's run.
func subscriptionGoroutines(t *testing.T) int {
	t.Helper()
	return goroutinesIn(t, "keyhook/dispatcher.(*runner).run", "keyhook/dispatcher.(*group).run")
}

// An idle subscription on the shared read costs the node one goroutine,
// which runs its cursor: its partitions' loops sleep without one, and no
// second goroutine waits beside the cursor for the subscription to change.
// A change still restarts it, on the same goroutine.
func TestAnIdleSharedReadSubscriptionCostsTheNodeOneGoroutine(t *testing.T) {
	topic := testutil.UniqueTopic("onegor")
	brokers := testutil.Kfake(t, 2, topic)
	rdb := testutil.StartRedis(t).Client()
	before, after := testutil.StartSink(t), testutil.StartSink(t)
	store, err := subscription.New(rdb, subscription.Config{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 12
	var subs []*subscription.Subscription
	for i := range n {
		sub := &subscription.Subscription{Name: fmt.Sprintf("onegor-%d", i), Topics: []string{topic},
			Endpoint: subscription.Endpoint{URL: before.URL}, DeadLetterTopic: subscription.DeadLetterNone}
		if err := store.Create(context.Background(), sub); err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	h := startNodeWith(t, brokers, rdb, store, sharedRead(nil, 0))
	defer h.stop(t)
	claimed := func(want int) func() bool {
		return func() bool {
			c := 0
			for _, o := range h.node.Owned() {
				if o.Claimed {
					c++
				}
			}
			return c == want
		}
	}
	oneEach := func(when string) {
		t.Helper()
		got := 0
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if got = subscriptionGoroutines(t); got == n {
				return
			}
		}
		t.Fatalf("%d goroutines run %d subscriptions %s, want one each", got, n, when)
	}
	update := func(fn func(*subscription.Subscription)) {
		t.Helper()
		if _, err := store.Update(context.Background(), subs[0].ID, subscription.AnyVersion, func(s *subscription.Subscription) error {
			fn(s)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, 60*time.Second, "every subscription's 2 partitions claimed", claimed(2*n))
	oneEach("idle")
	checkOwnedMatchesStats(t, h.node)

	update(func(s *subscription.Subscription) { s.Paused = true })
	testutil.WaitFor(t, 30*time.Second, "the paused subscription's partitions released", claimed(2*(n-1)))
	oneEach("with one paused")

	update(func(s *subscription.Subscription) { s.Paused, s.Endpoint.URL = false, after.URL })
	testutil.WaitFor(t, 60*time.Second, "the resumed subscription's partitions claimed again", claimed(2*n))
	const records = 20
	produce(t, brokers, topic, records, func(i int) string { return fmt.Sprintf("k-%d", i) }, func(i int) int32 { return int32(i % 2) })
	after.WaitAcked(t, records, time.Minute)
	testutil.WaitFor(t, time.Minute, "every record delivered to each unchanged subscription", func() bool {
		return len(before.Deliveries()) >= records*(n-1)
	})
	if got := len(before.Deliveries()); got != records*(n-1) {
		t.Errorf("the old endpoint got %d deliveries, want %d: the changed subscription delivered with its old version", got, records*(n-1))
	}
	oneEach("after a change")
}

// countingQueue counts the node's listings of the redrive queues.
type countingQueue struct {
	*deadletter.Queue
	mu       sync.Mutex
	calls    [][]string
	versions int
}

func (q *countingQueue) QueuedVersion(ctx context.Context) (string, error) {
	q.mu.Lock()
	q.versions++
	q.mu.Unlock()
	return q.Queue.QueuedVersion(ctx)
}

// counts returns how many listings and reads of the count of pushes the
// node made.
func (q *countingQueue) counts() (listings, versions int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.calls), q.versions
}

func (q *countingQueue) QueuedMany(ctx context.Context, subs []string) (map[string][]deadletter.Source, error) {
	q.mu.Lock()
	q.calls = append(q.calls, append([]string(nil), subs...))
	q.mu.Unlock()
	return q.Queue.QueuedMany(ctx, subs)
}

func (q *countingQueue) snapshot() [][]string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([][]string(nil), q.calls...)
}

// One poll of the node lists the redrive queues of every subscription it
// runs, and each subscription's redrive is delivered from it.
func TestNodeRedriveLoopServesTwoSubscriptionsWithOnePoll(t *testing.T) {
	topic := testutil.UniqueTopic("redrive-node")
	brokers := testutil.Kfake(t, 1, topic)
	rdb := testutil.StartRedis(t).Client()
	dq, err := deadletter.NewQueue(rdb, deadletter.QueueConfig{})
	if err != nil {
		t.Fatal(err)
	}
	q := &countingQueue{Queue: dq}
	sink := testutil.StartSink(t)
	a := newSub("rda-"+topic, topic, sink.URL, subscription.OrderKey, 4)
	b := newSub("rdb-"+topic, topic, sink.URL, subscription.OrderKey, 4)
	h := startNode(t, brokers, rdb, []*subscription.Subscription{a, b}, func(c *dispatcher.Config) {
		c.Redrives = q
		c.RedriveInterval = 50 * time.Millisecond
	})
	defer h.stop(t)
	testutil.WaitFor(t, 30*time.Second, "both subscriptions' partition claimed", func() bool {
		claimed := 0
		for _, o := range h.node.Owned() {
			if o.Claimed {
				claimed++
			}
		}
		return claimed == 2
	})
	for _, s := range []*subscription.Subscription{a, b} {
		rd := deadletter.Redrive{DeliveryID: "dlv_" + s.ID, Topic: topic, Partition: 0, Offset: 0, Key: []byte("k"), Value: []byte("v")}
		if err := dq.Push(context.Background(), s.ID, []deadletter.Redrive{rd}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, 30*time.Second, "both redrives delivered", func() bool {
		seen := map[string]bool{}
		for _, d := range sink.Deliveries() {
			seen[d.ID] = true
		}
		return seen["dlv_"+a.ID] && seen["dlv_"+b.ID]
	})
	calls := q.snapshot()
	both := 0
	for _, c := range calls {
		switch len(c) {
		case 2:
			both++
		case 1:
			// Only while the second subscription had not started yet.
		default:
			t.Fatalf("a poll listed %v, want the node's subscriptions", c)
		}
	}
	if both == 0 {
		t.Fatalf("no poll listed both subscriptions' queues: %v", calls)
	}
}

// claimedOwned waits until the node claimed n partitions.
func claimedOwned(t *testing.T, h *nodeHandle, n int) {
	t.Helper()
	testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("%d partitions claimed", n), func() bool {
		claimed := 0
		for _, o := range h.node.Owned() {
			if o.Claimed {
				claimed++
			}
		}
		return claimed == n
	})
}

// With nothing queued, a node's redrive poll reads the count of pushes
// and lists no queue, but for its full listing every 40 polls.
func TestAnIdleNodeListsNoRedriveQueueBetweenItsFullPolls(t *testing.T) {
	topic := testutil.UniqueTopic("redrive-idle")
	brokers := testutil.Kfake(t, 2, topic)
	rdb := testutil.StartRedis(t).Client()
	dq, err := deadletter.NewQueue(rdb, deadletter.QueueConfig{})
	if err != nil {
		t.Fatal(err)
	}
	q := &countingQueue{Queue: dq}
	sink := testutil.StartSink(t)
	var subs []*subscription.Subscription
	for i := range 5 {
		subs = append(subs, newSub(fmt.Sprintf("rdi%d-%s", i, topic), topic, sink.URL, subscription.OrderKey, 4))
	}
	h := startNode(t, brokers, rdb, subs, func(c *dispatcher.Config) {
		c.Redrives = q
		c.RedriveInterval = 10 * time.Millisecond
	})
	defer h.stop(t)
	claimedOwned(t, h, 2*len(subs))
	l0, v0 := q.counts()
	time.Sleep(time.Second)
	l1, v1 := q.counts()
	polls, listings := v1-v0, l1-l0
	if polls < 10 {
		t.Fatalf("%d polls in a second of 10ms intervals", polls)
	}
	if max := polls/40 + 1; listings > max {
		t.Fatalf("%d listings of the redrive queues in %d polls with nothing queued; want at most %d (the full ones)", listings, polls, max)
	}
}

// A redrive queued through another node (its API, its own client) is
// delivered long before the next full listing: the count of pushes moved.
func TestARedriveQueuedThroughAnotherNodeIsDeliveredAtTheNextPoll(t *testing.T) {
	topic := testutil.UniqueTopic("redrive-other")
	brokers := testutil.Kfake(t, 1, topic)
	r := testutil.StartRedis(t)
	rdb := r.Client()
	sink := testutil.StartSink(t)
	a := newSub("rdo-"+topic, topic, sink.URL, subscription.OrderKey, 4)
	mine, err := deadletter.NewQueue(rdb, deadletter.QueueConfig{})
	if err != nil {
		t.Fatal(err)
	}
	// A poll a second: the next full listing is 40 s away.
	h := startNode(t, brokers, rdb, []*subscription.Subscription{a}, func(c *dispatcher.Config) {
		c.Redrives = mine
		c.RedriveInterval = time.Second
	})
	defer h.stop(t)
	claimedOwned(t, h, 1)
	time.Sleep(1500 * time.Millisecond) // past the first, full, poll
	other, err := deadletter.NewQueue(r.Client(), deadletter.QueueConfig{})
	if err != nil {
		t.Fatal(err)
	}
	rd := deadletter.Redrive{DeliveryID: "dlv_other", Topic: topic, Partition: 0, Offset: 0, Key: []byte("k"), Value: []byte("v")}
	if err := other.Push(context.Background(), a.ID, []deadletter.Redrive{rd}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the redrive delivered", func() bool {
		for _, d := range sink.Deliveries() {
			if d.ID == "dlv_other" {
				return true
			}
		}
		return false
	})
}
