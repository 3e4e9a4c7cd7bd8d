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

// claimWait is a node whose cursors' claims wait behind a gate, with
// what the tests of this file read of it.
type claimWait struct {
	h       *nodeHandle
	claims  *gatedClaims
	brokers []string
	topic   string
	sinks   []*testutil.Sink
	subs    []*subscription.Subscription
	metrics *sdkmetric.ManualReader

	mu      sync.Mutex
	reasons []string // why cursors detached (Config.CursorDetached)
}

// startClaimWait starts a node on the shared read with n subscriptions
// of one single-partition topic, their claims held until claims.gate
// closes, and waits until every cursor has its partition: one assigned
// after the reader fetched starts behind it and catches up by design
// (cursor.go), which is not what these tests are about.
func startClaimWait(t *testing.T, name string, n, window int, mod func(*dispatcher.Config)) *claimWait {
	t.Helper()
	cw := &claimWait{topic: testutil.UniqueTopic(name), metrics: sdkmetric.NewManualReader()}
	cw.brokers = testutil.Kfake(t, 1, cw.topic)
	store, err := tracking.New(testutil.StartRedis(t).Client(), tracking.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cw.claims = &gatedClaims{Store: store, gate: make(chan struct{})}
	for i := range n {
		s := testutil.StartSink(t)
		cw.sinks = append(cw.sinks, s)
		cw.subs = append(cw.subs, newSub(fmt.Sprintf("%s-%d", name, i), cw.topic, s.URL, subscription.OrderKey, window))
	}
	cw.h = startNodeTracking(t, cw.brokers, cw.claims, staticSubs(cw.subs), func(c *dispatcher.Config) {
		sharedRead(cw.metrics, 0)(c)
		c.CursorDetached = func(sub, _ string, _ int32, _ int64, reason string) {
			cw.mu.Lock()
			defer cw.mu.Unlock()
			cw.reasons = append(cw.reasons, sub+": "+reason)
		}
		if mod != nil {
			mod(c)
		}
	})
	testutil.WaitFor(t, 30*time.Second, "every cursor assigned its partition", func() bool { return len(cw.h.node.Owned()) == n })
	return cw
}

// produceBatches produces batches of each records over keys keys, waiting
// for the reader to fetch each, and calls after (if not nil) once it
// did; it returns the partition's end.
func (cw *claimWait) produceBatches(t *testing.T, batches, each, keys int, after func(batch int)) map[int32]int64 {
	t.Helper()
	var ends map[int32]int64
	for b := range batches {
		ends = produce(t, cw.brokers, cw.topic, each, func(i int) string { return fmt.Sprintf("k-%d", (b*each+i)%keys) }, func(int) int32 { return 0 })
		testutil.WaitFor(t, 30*time.Second, "the reader fetched the batch", func() bool {
			return testutil.Int64Metric(t, cw.metrics, "keyhook.reader.records.fetched") >= int64((b+1)*each)
		})
		if after != nil {
			after(b)
		}
	}
	return ends
}

// releaseAndCheck lets the claims through and checks that every
// subscription got all n records of the partition below ends, in order.
func (cw *claimWait) releaseAndCheck(t *testing.T, n int, ends map[int32]int64) {
	t.Helper()
	close(cw.claims.gate)
	for i, s := range cw.subs {
		cw.sinks[i].WaitAcked(t, n, time.Minute)
		checkSink(t, s.ID, cw.sinks[i], cw.topic, ends)
	}
}

// detachReasons returns why cursors detached so far.
func (cw *claimWait) detachReasons() []string {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	return append([]string(nil), cw.reasons...)
}

// A cursor whose claim of a partition is still on its way keeps the
// batches the reader hands it meanwhile, and delivers them once claimed:
// it does not leave the shared read. It left at the second batch, so a
// node restarted with 1,000 subscriptions sent most of its cursors to
// catch up, 32 at a time, and took up to 74 s to deliver on every
// partition again.
func TestACursorWaitingForItsClaimKeepsTheSharedRead(t *testing.T) {
	cw := startClaimWait(t, "claimwait", 3, 16, nil)
	// Batch after batch while the claims wait: the reader hands each to
	// every cursor.
	const batches, each = 5, 10
	ends := cw.produceBatches(t, batches, each, 7, nil)
	cw.releaseAndCheck(t, batches*each, ends)
	if n := testutil.Int64Metric(t, cw.metrics, "keyhook.cursor.detaches"); n != 0 {
		t.Errorf("%d cursors left the shared read while their claims were on their way (%v), want none", n, cw.detachReasons())
	}
	if n := testutil.Int64Metric(t, cw.metrics, "keyhook.records.caught_up"); n != 0 {
		t.Errorf("%d records read by catch-ups, want none: the reader's batches waited for the claims", n)
	}
}

// What a cursor keeps for its claim is bounded: past it, the cursor
// leaves the shared read, saying why, and reads what it missed on a
// catch-up of its own once claimed. Nothing is lost or reordered.
func TestACursorWhoseClaimWaitsPastItsBacklogCatchesUp(t *testing.T) {
	cw := startClaimWait(t, "claimlong", 1, 64, nil)
	const batches, each = 2, 400 // 800 records: past the 512 a cursor keeps
	ends := cw.produceBatches(t, batches, each, 13, nil)
	cw.releaseAndCheck(t, batches*each, ends)
	if n := testutil.Int64Metric(t, cw.metrics, "keyhook.cursor.detaches"); n != 1 {
		t.Errorf("the cursor left the shared read %d times, want once", n)
	}
	if reasons := cw.detachReasons(); len(reasons) != 1 || !strings.HasPrefix(reasons[0], "claimlong-0: claim pending") {
		t.Errorf("told of the cursor leaving with %q, want once for its claim pending", reasons)
	}
}

// What cursors keep for their claims is reserved of the node's memory
// budget (--max-buffered-bytes): with no room left a cursor leaves the
// shared read, saying why, instead of growing the node past it, and the
// budget is whole again once every record is acked. Without the
// reservation the three cursors kept 200 records each outside the budget.
func TestCursorsWaitingForClaimsKeepOnlyWhatTheNodesBudgetHolds(t *testing.T) {
	// Room for the entries of two of the six batches the cursors keep
	// (100 records of 128 bytes each), and for every record once
	// claimed, one at a time per key.
	const budget = 30_000
	cw := startClaimWait(t, "claimbudget", 3, 16, func(c *dispatcher.Config) { c.MaxBufferedBytes = budget })
	// The first batch waits in each machine's backlog as any batch does;
	// the next two are kept for the claims.
	const batches, each = 3, 100
	ends := cw.produceBatches(t, batches, each, 7, func(b int) {
		if used := cw.h.node.BufferedBytes(); used > budget {
			t.Errorf("after batch %d the node holds %d bytes of its budget of %d", b, used, budget)
		}
	})
	// Six batches to keep at up to 12,800 bytes each (a fetch may split
	// one): they fill the budget to within one of them.
	testutil.WaitFor(t, 10*time.Second, "the reservations made", func() bool { return cw.h.node.BufferedBytes() >= budget-each*128 })
	cw.releaseAndCheck(t, batches*each, ends)
	reasons := cw.detachReasons()
	if len(reasons) == 0 {
		t.Fatalf("no cursor left the shared read, want those the budget had no room for to")
	}
	for _, r := range reasons {
		if !strings.Contains(r, ": claim pending") {
			t.Errorf("a cursor left the shared read for %q, want its claim pending", r)
		}
	}
	testutil.WaitFor(t, 30*time.Second, "the node's budget whole again", func() bool { return cw.h.node.BufferedBytes() == 0 })
}
