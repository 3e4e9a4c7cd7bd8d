package dispatcher_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
)

// A subscription missing from the store for less than RemoveGrace — a
// Redis that lost its data while the config log restores it — keeps its
// consumer (no rebalance, no handover); missing for longer, it stops.
func TestBrieflyMissingSubscriptionKeepsItsConsumer(t *testing.T) {
	brokers := testutil.Kfake(t, 1, "grace")
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	produce(t, brokers, "grace", 100, func(i int) string { return fmt.Sprintf("k%d", i%10) }, func(int) int32 { return 0 })
	sub := newSub("grace", "grace", sink.URL, subscription.OrderKey, 8)
	f := make(feed, 1)
	f <- []*subscription.Subscription{sub}
	h := startNodeWith(t, brokers, rdb, f, func(c *dispatcher.Config) { c.RemoveGrace = 2 * time.Second })
	sink.WaitAcked(t, 100, time.Minute)
	testutil.WaitFor(t, 30*time.Second, "the node owns the partition", func() bool { return len(h.node.Owned()) == 1 })

	f <- nil // the store came back empty
	time.Sleep(500 * time.Millisecond)
	f <- []*subscription.Subscription{sub} // restored
	time.Sleep(2 * time.Second)
	f <- []*subscription.Subscription{sub} // a resync past the grace
	time.Sleep(200 * time.Millisecond)
	// The same consumer: a restarted one would count no delivery yet.
	if len(h.node.Owned()) != 1 || delivered(h.node) < 100 {
		t.Fatalf("the consumer restarted although its subscription was missing for 0.5 s only; owned %v, delivered %d", h.node.Owned(), delivered(h.node))
	}

	f <- nil // deleted for good
	time.Sleep(2100 * time.Millisecond)
	f <- nil // a resync past the grace
	testutil.WaitFor(t, 30*time.Second, "the consumer of a deleted subscription stops", func() bool { return len(h.node.Owned()) == 0 })
}
