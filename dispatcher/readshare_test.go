package dispatcher_test

import (
	"fmt"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/keyrange"
	"github.com/keyhook/keyhook/subscription"
)

// With the shared read, nodes beyond the partition count share it by key
// range as a subscription's own group does: three nodes on one
// partition, two subscriptions that share and one with ordering
// partition. Each node fetches the partition once for all three; for
// each sharing subscription it delivers exactly the records whose key
// hash is in its ranges, the three ranges disjoint and covering the
// partition; the subscription that does not share is delivered whole by
// the node holding hash 0. Every record arrives once, in key order, and
// each subscription commits to the log end.
func TestSharedReadNodesBeyondThePartitionCountShareItByKeyRange(t *testing.T) {
	testutil.KafkaTiers(t, 1, []string{"readshare"}, func(t *testing.T, brokers []string) {
		topic := "readshare"
		if t.Name() != "TestSharedReadNodesBeyondThePartitionCountShareItByKeyRange/kfake" {
			topic = testutil.UniqueTopic("readshare")
			testutil.CreateTopics(t, brokers, 1, topic)
		}
		rdb := testutil.StartRedis(t).Client()
		var sinks []*testutil.Sink
		var subs []*subscription.Subscription
		for i, o := range []subscription.Ordering{subscription.OrderKey, subscription.OrderKey, subscription.OrderPartition} {
			sink := testutil.StartSink(t)
			sinks = append(sinks, sink)
			subs = append(subs, newSub(fmt.Sprintf("readshare-%d", i), topic, sink.URL, o, 16))
		}
		var nodes []*nodeHandle
		var metrics []*sdkmetric.ManualReader
		for range 3 {
			m := sdkmetric.NewManualReader()
			metrics = append(metrics, m)
			nodes = append(nodes, startNode(t, brokers, rdb, subs, sharedRead(m, 0)))
		}
		// The split settles before anything is produced, so each record
		// is delivered by the node whose ranges it falls in.
		var split [][]keyrange.Set
		for _, s := range subs[:2] {
			split = append(split, waitSharedBy(t, nodes, s.ID))
		}
		for i := range nodes {
			checkOwnedMatchesStats(t, nodes[i].node)
			if !split[0][i].Equal(split[1][i]) {
				t.Errorf("node %d delivers %v of one subscription and %v of the other, want the reader's ranges for both", i, split[0][i], split[1][i])
			}
		}
		const n, keys = 6000, 300
		keyOf := func(i int) string { return fmt.Sprintf("key-%d", i%keys) }
		ends := produce(t, brokers, topic, n, keyOf, func(int) int32 { return 0 })

		want := make([]int64, len(nodes))
		for i := range n {
			h := keyrange.Of([]byte(keyOf(i)), int64(i))
			for j, rs := range split[0] {
				if rs.Contains(h) {
					want[j]++
				}
			}
		}
		adm := testutil.Admin(t, brokers)
		for i, s := range subs {
			sinks[i].WaitAcked(t, n, 2*time.Minute)
			testutil.WaitCommitted(t, adm, s.GroupID(), ends, time.Minute)
			checkSink(t, s.ID, sinks[i], topic, ends)
			if o := sinks[i].KeyOverlaps(); len(o) > 0 {
				t.Errorf("%s: %d keys had two requests in flight at once, first %s", s.ID, len(o), o[0])
			}
		}
		for j, h := range nodes {
			for _, s := range subs[:2] {
				if got := deliveredOf(h.node, s.ID); got != want[j] {
					t.Errorf("node %d delivered %d records of %s, want the %d whose key hash is in its ranges %v", j, got, s.ID, want[j], split[0][j])
				}
			}
			wantWhole := int64(0)
			if split[0][j].Contains(0) {
				wantWhole = n
			}
			if got := deliveredOf(h.node, subs[2].ID); got != wantWhole {
				t.Errorf("node %d (ranges %v) delivered %d records of the subscription with ordering partition, want %d: the holder of hash 0 delivers it whole", j, split[0][j], got, wantWhole)
			}
			fetched := testutil.Int64Metric(t, metrics[j], "keyhook.reader.records.fetched")
			if fetched < n || fetched > n+n/10 {
				t.Errorf("node %d's reader fetched %d records for %d produced, want the whole partition once for its three subscriptions", j, fetched, n)
			}
		}
	})
}

// With the shared read, a node joining a partition's sharers and one
// leaving move key ranges while records flow: one node delivers alone,
// two more join (the first shrinks in place), then one stops gracefully
// (the others grow). Every record of every subscription arrives once, in
// key order, no key is ever in flight on two nodes at once, and each
// subscription commits to the log end.
func TestSharedReadNodesJoiningAndLeavingMoveKeyRanges(t *testing.T) {
	testutil.KafkaTiers(t, 1, []string{"reshare"}, func(t *testing.T, brokers []string) {
		topic := "reshare"
		if t.Name() != "TestSharedReadNodesJoiningAndLeavingMoveKeyRanges/kfake" {
			topic = testutil.UniqueTopic("reshare")
			testutil.CreateTopics(t, brokers, 1, topic)
		}
		rdb := testutil.StartRedis(t).Client()
		const n, keys = 12000, 300
		keyOf := func(i int) string { return fmt.Sprintf("key-%d", i%keys) }
		ends := produce(t, brokers, topic, n, keyOf, func(int) int32 { return 0 })
		var sinks []*testutil.Sink
		var subs []*subscription.Subscription
		for i, o := range []subscription.Ordering{subscription.OrderKey, subscription.OrderKey, subscription.OrderPartition} {
			sink := testutil.StartSink(t)
			if o == subscription.OrderKey {
				// Slow enough that ranges move while records flow; the
				// subscription with ordering partition sends one at a
				// time and keeps up without.
				sink.Latency = func(*testutil.Delivery) time.Duration { return 5 * time.Millisecond }
			}
			sinks = append(sinks, sink)
			subs = append(subs, newSub(fmt.Sprintf("reshare-%d", i), topic, sink.URL, o, 16))
		}
		nodes := []*nodeHandle{startNode(t, brokers, rdb, subs, sharedRead(nil, 0))}
		testutil.WaitFor(t, 30*time.Second, "the first node delivers", func() bool { return sinks[0].AckedCount() > 200 })
		for range 2 {
			nodes = append(nodes, startNode(t, brokers, rdb, subs, sharedRead(nil, 0)))
		}
		for _, s := range subs[:2] {
			t.Logf("%s on three nodes: %v (%d acked)", s.ID, waitSharedBy(t, nodes, s.ID), sinks[0].AckedCount())
		}
		testutil.WaitFor(t, 30*time.Second, "the third node delivers", func() bool { return deliveredOf(nodes[2].node, subs[0].ID) > 0 })
		nodes[2].stop(t)
		for _, s := range subs[:2] {
			t.Logf("%s on two nodes: %v (%d acked)", s.ID, waitSharedBy(t, nodes[:2], s.ID), sinks[0].AckedCount())
		}
		adm := testutil.Admin(t, brokers)
		for i, s := range subs {
			sinks[i].WaitAcked(t, n, 3*time.Minute)
			testutil.WaitCommitted(t, adm, s.GroupID(), ends, time.Minute)
			checkSink(t, s.ID, sinks[i], topic, ends)
			if o := sinks[i].KeyOverlaps(); len(o) > 0 {
				t.Errorf("%s: %d keys had two requests in flight at once, first %s", s.ID, len(o), o[0])
			}
		}
		for i, h := range nodes[:2] {
			if d := deliveredOf(h.node, subs[0].ID); d == 0 {
				t.Errorf("node %d delivered nothing of %s", i, subs[0].ID)
			}
		}
	})
}

// waitSharedBy waits until the nodes deliver disjoint key ranges of sub's
// only partition, together all of it, and returns them by node.
func waitSharedBy(t *testing.T, nodes []*nodeHandle, sub string) []keyrange.Set {
	t.Helper()
	var ranges []keyrange.Set
	testutil.WaitFor(t, 60*time.Second, fmt.Sprintf("%d nodes deliver disjoint ranges of %s covering the partition", len(nodes), sub), func() bool {
		ranges = ranges[:0]
		var all keyrange.Set
		for _, h := range nodes {
			rs := rangesOf(h.node, sub)
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

// rangesOf returns the key ranges a node delivers of sub's only
// partition, nil when it delivers none.
func rangesOf(n *dispatcher.Node, sub string) keyrange.Set {
	for _, g := range n.Stats() {
		if g.Subscription != sub {
			continue
		}
		for _, p := range g.Partitions {
			if p.Claimed {
				return p.Ranges
			}
		}
	}
	return nil
}

// deliveredOf returns how many records of sub a node delivered.
func deliveredOf(n *dispatcher.Node, sub string) int64 {
	for _, g := range n.Stats() {
		if g.Subscription == sub {
			return g.Delivered
		}
	}
	return 0
}
