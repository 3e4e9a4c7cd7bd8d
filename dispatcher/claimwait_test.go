package dispatcher_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
)

// gatedClaims holds the tracker's claims until released, as a node
// restarting with thousands of partitions to claim waits for them.
type gatedClaims struct {
	*tracking.Store
	gate chan struct{}
}

func (g *gatedClaims) ClaimMany(ctx context.Context, cs []tracking.PartitionClaim) []tracking.ClaimResult {
	select {
	case <-g.gate:
	case <-ctx.Done():
	}
	return g.Store.ClaimMany(ctx, cs)
}

// A cursor whose claim of a partition is still on its way keeps the
// batches the reader hands it meanwhile, and delivers them once claimed:
// it does not leave the shared read. It left at the second batch, so a
// node restarted with 1,000 subscriptions sent most of its cursors to
// catch up, 32 at a time, and took up to 74 s to deliver on every
// partition again.
func TestACursorWaitingForItsClaimKeepsTheSharedRead(t *testing.T) {
	topic := testutil.UniqueTopic("claimwait")
	brokers := testutil.Kfake(t, 1, topic)
	rdb := testutil.StartRedis(t).Client()
	store, err := tracking.New(rdb, tracking.Config{})
	if err != nil {
		t.Fatal(err)
	}
	claims := &gatedClaims{Store: store, gate: make(chan struct{})}
	var sinks []*testutil.Sink
	var subs []*subscription.Subscription
	for i := range 3 {
		s := testutil.StartSink(t)
		sinks = append(sinks, s)
		subs = append(subs, newSub(fmt.Sprintf("claimwait-%d", i), topic, s.URL, subscription.OrderKey, 16))
	}
	metrics := sdkmetric.NewManualReader()
	var mu sync.Mutex
	var notices []string
	h := startNodeTracking(t, brokers, claims, staticSubs(subs), func(c *dispatcher.Config) {
		sharedRead(metrics, 0)(c)
		c.CursorDetached = func(sub, topic string, partition int32, behind int64, reason string) {
			mu.Lock()
			defer mu.Unlock()
			notices = append(notices, sub+": "+reason)
		}
	})
	// Every cursor has its partition before the first batch: one
	// assigned after the reader fetched starts behind it and catches up
	// by design (cursor.go), which is not what this test is about.
	testutil.WaitFor(t, 30*time.Second, "every cursor assigned its partition", func() bool { return len(h.node.Owned()) == len(subs) })
	// Batch after batch while the claims wait: the reader hands each to
	// every cursor.
	const batches, each = 5, 10
	var ends map[int32]int64
	for b := range batches {
		ends = produce(t, brokers, topic, each, func(i int) string { return fmt.Sprintf("k-%d", (b*each+i)%7) }, func(int) int32 { return 0 })
		testutil.WaitFor(t, 30*time.Second, "the reader fetched the batch", func() bool {
			return testutil.Int64Metric(t, metrics, "keyhook.reader.records.fetched") >= int64((b+1)*each)
		})
	}
	close(claims.gate)
	for i, s := range subs {
		sinks[i].WaitAcked(t, batches*each, time.Minute)
		checkSink(t, s.ID, sinks[i], topic, ends)
	}
	if n := testutil.Int64Metric(t, metrics, "keyhook.cursor.detaches"); n != 0 {
		mu.Lock()
		defer mu.Unlock()
		t.Errorf("%d cursors left the shared read while their claims were on their way (%v), want none", n, notices)
	}
	if n := testutil.Int64Metric(t, metrics, "keyhook.records.caught_up"); n != 0 {
		t.Errorf("%d records read by catch-ups, want none: the reader's batches waited for the claims", n)
	}
}

// What a cursor keeps for its claim is bounded: past it, the cursor
// leaves the shared read, saying why, and reads what it missed on a
// catch-up of its own once claimed. Nothing is lost or reordered.
func TestACursorWhoseClaimWaitsPastItsBacklogCatchesUp(t *testing.T) {
	topic := testutil.UniqueTopic("claimlong")
	brokers := testutil.Kfake(t, 1, topic)
	rdb := testutil.StartRedis(t).Client()
	store, err := tracking.New(rdb, tracking.Config{})
	if err != nil {
		t.Fatal(err)
	}
	claims := &gatedClaims{Store: store, gate: make(chan struct{})}
	sink := testutil.StartSink(t)
	sub := newSub("claimlong", topic, sink.URL, subscription.OrderKey, 64)
	metrics := sdkmetric.NewManualReader()
	var mu sync.Mutex
	var reasons []string
	h := startNodeTracking(t, brokers, claims, staticSubs([]*subscription.Subscription{sub}), func(c *dispatcher.Config) {
		sharedRead(metrics, 0)(c)
		c.CursorDetached = func(_, _ string, _ int32, _ int64, reason string) {
			mu.Lock()
			defer mu.Unlock()
			reasons = append(reasons, reason)
		}
	})
	testutil.WaitFor(t, 30*time.Second, "the cursor assigned its partition", func() bool { return len(h.node.Owned()) == 1 })
	const batches, each = 2, 400 // 800 records: past the 512 a cursor keeps
	var ends map[int32]int64
	for b := range batches {
		ends = produce(t, brokers, topic, each, func(i int) string { return fmt.Sprintf("k-%d", (b*each+i)%13) }, func(int) int32 { return 0 })
		testutil.WaitFor(t, 30*time.Second, "the reader fetched the batch", func() bool {
			return testutil.Int64Metric(t, metrics, "keyhook.reader.records.fetched") >= int64((b+1)*each)
		})
	}
	close(claims.gate)
	sink.WaitAcked(t, batches*each, time.Minute)
	checkSink(t, sub.ID, sink, topic, ends)
	if n := testutil.Int64Metric(t, metrics, "keyhook.cursor.detaches"); n != 1 {
		t.Errorf("the cursor left the shared read %d times, want once", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reasons) != 1 || !strings.HasPrefix(reasons[0], "claim pending") {
		t.Errorf("told of the cursor leaving with %q, want once for its claim pending", reasons)
	}
}

// What cursors keep for their claims is reserved of the node's memory
// budget (--max-buffered-bytes): with no room left a cursor leaves the
// shared read, saying why, instead of growing the node past it, and the
// budget is whole again once every record is acked. Without the
// reservation the three cursors kept 200 records each outside the budget.
func TestCursorsWaitingForClaimsKeepOnlyWhatTheNodesBudgetHolds(t *testing.T) {
	topic := testutil.UniqueTopic("claimbudget")
	brokers := testutil.Kfake(t, 1, topic)
	rdb := testutil.StartRedis(t).Client()
	store, err := tracking.New(rdb, tracking.Config{})
	if err != nil {
		t.Fatal(err)
	}
	claims := &gatedClaims{Store: store, gate: make(chan struct{})}
	var sinks []*testutil.Sink
	var subs []*subscription.Subscription
	for i := range 3 {
		s := testutil.StartSink(t)
		sinks = append(sinks, s)
		subs = append(subs, newSub(fmt.Sprintf("claimbudget-%d", i), topic, s.URL, subscription.OrderKey, 16))
	}
	metrics := sdkmetric.NewManualReader()
	var mu sync.Mutex
	var reasons []string
	// Room for the entries of two of the six batches the cursors keep
	// (100 records of 128 bytes each), and for every record once
	// claimed, one at a time per key.
	const budget = 30_000
	h := startNodeTracking(t, brokers, claims, staticSubs(subs), func(c *dispatcher.Config) {
		sharedRead(metrics, 0)(c)
		c.MaxBufferedBytes = budget
		c.CursorDetached = func(_, _ string, _ int32, _ int64, reason string) {
			mu.Lock()
			defer mu.Unlock()
			reasons = append(reasons, reason)
		}
	})
	testutil.WaitFor(t, 30*time.Second, "every cursor assigned its partition", func() bool { return len(h.node.Owned()) == len(subs) })
	// The first batch waits in each machine's backlog as any batch does;
	// the next two are kept for the claims.
	const batches, each = 3, 100
	var ends map[int32]int64
	for b := range batches {
		ends = produce(t, brokers, topic, each, func(i int) string { return fmt.Sprintf("k-%d", (b*each+i)%7) }, func(int) int32 { return 0 })
		testutil.WaitFor(t, 30*time.Second, "the reader fetched the batch", func() bool {
			return testutil.Int64Metric(t, metrics, "keyhook.reader.records.fetched") >= int64((b+1)*each)
		})
		if used := h.node.BufferedBytes(); used > budget {
			t.Errorf("after batch %d the node holds %d bytes of its budget of %d", b, used, budget)
		}
	}
	// Six batches to keep at up to 12,800 bytes each (a fetch may split
	// one): they fill the budget to within one of them.
	testutil.WaitFor(t, 10*time.Second, "the reservations made", func() bool { return h.node.BufferedBytes() >= budget-each*128 })
	close(claims.gate)
	for i, s := range subs {
		sinks[i].WaitAcked(t, batches*each, time.Minute)
		checkSink(t, s.ID, sinks[i], topic, ends)
	}
	mu.Lock()
	got := append([]string(nil), reasons...)
	mu.Unlock()
	if len(got) == 0 {
		t.Fatalf("no cursor left the shared read, want those the budget had no room for to")
	}
	for _, r := range got {
		if !strings.HasPrefix(r, "claim pending") {
			t.Errorf("a cursor left the shared read for %q, want its claim pending", r)
		}
	}
	testutil.WaitFor(t, 30*time.Second, "the node's budget whole again", func() bool { return h.node.BufferedBytes() == 0 })
}
