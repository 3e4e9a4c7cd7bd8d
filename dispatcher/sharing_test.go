package dispatcher_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/keyrange"
	"github.com/keyhook/keyhook/subscription"
)

// Nodes beyond the partition count share it by key range: one partition,
// a node delivering alone, two more joining under load, then one leaving
// (graceful). The partition is split three ways, then two; each node
// delivers its keys, every record arrives once in per-key order (a key
// never has two records in flight, whichever nodes sent them), and the
// merged watermark is committed to the log end.
func TestNodesBeyondThePartitionCountShareItByKeyRange(t *testing.T) {
	testutil.KafkaTiers(t, 1, []string{"shared"}, func(t *testing.T, brokers []string) {
		topic := "shared"
		if t.Name() != "TestNodesBeyondThePartitionCountShareItByKeyRange/kfake" {
			topic = testutil.UniqueTopic("shared")
			testutil.CreateTopics(t, brokers, 1, topic)
		}
		rdb := testutil.StartRedis(t).Client()
		sink := testutil.StartSink(t)
		sink.Latency = func(*testutil.Delivery) time.Duration { return 10 * time.Millisecond }
		const n, keys = 20000, 300
		keyOf := func(i int) string { return fmt.Sprintf("key-%d", i%keys) }
		ends := produce(t, brokers, topic, n, keyOf, func(int) int32 { return 0 })

		sub := newSub("shared", topic, sink.URL, subscription.OrderKey, 16)
		nodes := []*nodeHandle{startNode(t, brokers, rdb, []*subscription.Subscription{sub}, nil)}
		testutil.WaitFor(t, 30*time.Second, "the first node delivers", func() bool { return sink.AckedCount() > 200 })
		for range 2 {
			nodes = append(nodes, startNode(t, brokers, rdb, []*subscription.Subscription{sub}, nil))
		}
		// The three split the partition while records flow.
		t.Logf("three nodes: %v (%d acked)", waitShared(t, nodes), sink.AckedCount())
		testutil.WaitFor(t, 30*time.Second, "the third node delivers", func() bool { return delivered(nodes[2].node) > 0 })
		nodes[2].stop(t)
		t.Logf("two nodes: %v (%d acked)", waitShared(t, nodes[:2]), sink.AckedCount())
		sink.WaitAcked(t, n, 3*time.Minute)
		testutil.WaitCommitted(t, testutil.Admin(t, brokers), sub.GroupID(), ends, 60*time.Second)

		for i, h := range nodes[:2] {
			if d := delivered(h.node); d == 0 {
				t.Errorf("node %d delivered nothing", i)
			}
		}
		if v := sink.KeyOrderViolations(); len(v) > 0 {
			t.Fatalf("%d per-key order violations, first: %s", len(v), v[0])
		}
		if d := sink.Duplicates(); d != 0 {
			t.Errorf("%d duplicates after graceful range handovers, want 0", d)
		}
		if m := sink.Missing(testutil.TP{Topic: topic, Partition: 0}, ends[0]); len(m) > 0 {
			t.Errorf("%d records never delivered, first %d", len(m), m[0])
		}
	})
}

// waitShared waits until nodes own disjoint ranges covering the
// partition, and returns them.
func waitShared(t *testing.T, nodes []*nodeHandle) []keyrange.Set {
	t.Helper()
	var ranges []keyrange.Set
	testutil.WaitFor(t, 60*time.Second, fmt.Sprintf("%d nodes own disjoint ranges covering the partition", len(nodes)), func() bool {
		ranges = ranges[:0]
		var all keyrange.Set
		for _, h := range nodes {
			rs := ownedRanges(h.node)
			if rs == nil || (len(nodes) > 1 && rs.IsFull()) || all.Overlaps(rs) {
				return false
			}
			ranges = append(ranges, rs)
			all = all.Union(rs)
		}
		return all.IsFull()
	})
	return ranges
}

// ownedRanges returns the key ranges a node delivers of the only
// partition of its only subscription, nil when it owns none.
func ownedRanges(n *dispatcher.Node) keyrange.Set {
	for _, g := range n.Stats() {
		for _, p := range g.Partitions {
			if p.Claimed {
				return p.Ranges
			}
		}
	}
	return nil
}

func delivered(n *dispatcher.Node) int64 {
	var d int64
	for _, g := range n.Stats() {
		d += g.Delivered
	}
	return d
}
