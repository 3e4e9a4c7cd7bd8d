package dispatcher_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
)

// gatedLoads counts the tracker's Loads, each a lookup of where cursors
// start, and holds them while its gate is set.
type gatedLoads struct {
	*tracking.Store
	entered chan struct{}

	mu    sync.Mutex
	loads int
	gate  chan struct{}
}

func (g *gatedLoads) Load(ctx context.Context, pks []tracking.PartitionKey) (map[tracking.PartitionKey]tracking.PartitionState, error) {
	g.mu.Lock()
	g.loads++
	gate := g.gate
	g.mu.Unlock()
	if gate != nil {
		select {
		case g.entered <- struct{}{}:
		default:
		}
		select {
		case <-gate:
		case <-ctx.Done():
		}
	}
	return g.Store.Load(ctx, pks)
}

// arm holds the Loads from now until the returned release.
func (g *gatedLoads) arm() (release func()) {
	gate := make(chan struct{})
	g.mu.Lock()
	g.gate, g.loads = gate, 0
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		g.gate = nil
		g.mu.Unlock()
		close(gate)
	}
}

func (g *gatedLoads) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.loads
}

// Cursors joining a reader that owns partitions already look up where
// they start together, not one after another: a node restarting with
// 1,000 subscriptions made a lookup of five round trips per cursor, each
// waiting for the one before, and on a full machine its cursors started
// over four minutes. Every cursor still gets its partitions and
// delivers.
func TestCursorsJoiningAReaderLookUpTheirStartsTogether(t *testing.T) {
	topic := testutil.UniqueTopic("join")
	const parts = 4
	brokers := testutil.Kfake(t, parts, topic)
	rdb := testutil.StartRedis(t).Client()
	store, err := tracking.New(rdb, tracking.Config{})
	if err != nil {
		t.Fatal(err)
	}
	loads := &gatedLoads{Store: store, entered: make(chan struct{}, 1)}
	subs, err := subscription.New(rdb, subscription.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sink := testutil.StartSink(t)
	create := func(i int) {
		t.Helper()
		s := &subscription.Subscription{Name: fmt.Sprintf("join-%d", i), Topics: []string{topic},
			Endpoint: subscription.Endpoint{URL: sink.URL}, DeadLetterTopic: subscription.DeadLetterNone}
		if err := subs.Create(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	create(0)
	node := startNodeTracking(t, brokers, loads, subs, sharedRead(nil, 0))
	defer node.stop(t)
	claimed := func() int {
		n := 0
		for _, o := range node.node.Owned() {
			if o.Claimed {
				n++
			}
		}
		return n
	}
	testutil.WaitFor(t, 60*time.Second, "the first subscription's partitions claimed", func() bool { return claimed() == parts })

	// The next cursor's lookup waits while the others join behind it.
	release := loads.arm()
	create(1)
	select {
	case <-loads.entered:
	case <-time.After(30 * time.Second):
		release()
		t.Fatal("the second cursor never looked up where it starts")
	}
	const more = 30
	for i := range more {
		create(2 + i)
	}
	testutil.WaitFor(t, 30*time.Second, "every subscription running on the node", func() bool { return len(node.node.Stats()) == 2+more })
	time.Sleep(time.Second) // their cursors queue behind the held lookup
	release()

	testutil.WaitFor(t, 60*time.Second, "every subscription's partitions claimed", func() bool { return claimed() == (2+more)*parts })
	if n := loads.count(); n > 5 {
		t.Errorf("%d lookups for %d cursors joining at once, want them together (at most 5), not one each", n, 1+more)
	}
	const records = 8
	produce(t, brokers, topic, records, func(i int) string { return fmt.Sprintf("k-%d", i) }, func(i int) int32 { return int32(i % parts) })
	testutil.WaitFor(t, time.Minute, "every record delivered to every subscription", func() bool {
		return len(sink.Deliveries()) >= records*(2+more)
	})
}
