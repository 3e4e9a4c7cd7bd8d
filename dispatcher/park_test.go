package dispatcher_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
)

// A stuck key never stops its partition: one key's endpoint hangs while
// its records keep coming, far more of them than the partition's window.
// Its records beyond a few are parked by offset, so every other key's
// record is delivered while it hangs; once it answers, its parked records
// are read again from Kafka and delivered in offset order, and the commit
// reaches the log end.
func TestStuckKeyNeverStopsItsPartition(t *testing.T) {
	testutil.KafkaTiers(t, 1, []string{"parking"}, func(t *testing.T, brokers []string) {
		topic := "parking"
		if t.Name() != "TestStuckKeyNeverStopsItsPartition/kfake" {
			topic = testutil.UniqueTopic("parking")
			testutil.CreateTopics(t, brokers, 1, topic)
		}
		rdb := testutil.StartRedis(t).Client()
		sink := testutil.StartSink(t)
		release := make(chan struct{})
		var once sync.Once
		defer once.Do(func() { close(release) })
		sink.Latency = func(d *testutil.Delivery) time.Duration {
			if d.Key == "stuck" {
				<-release
			}
			return 0
		}
		// Every fifth record is the stuck key's: 800 of 4,000, four times
		// the window.
		const n, window, stuckEvery = 4000, 200, 5
		keyOf := func(i int) string {
			if i%stuckEvery == 0 {
				return "stuck"
			}
			return fmt.Sprintf("k%d", i%97)
		}
		ends := produce(t, brokers, topic, n, keyOf, func(int) int32 { return 0 })
		sub := newSub("parking", topic, sink.URL, subscription.OrderKey, 16)
		h := startNode(t, brokers, rdb, []*subscription.Subscription{sub}, func(c *dispatcher.Config) {
			c.MaxWindow = window
			c.ParkAfter = new(4)
		})

		// Everything but the stuck key's records (one of them in flight).
		others := n - n/stuckEvery
		testutil.WaitFor(t, time.Minute, "every other key delivered while one key hangs", func() bool {
			return sink.AckedCount() >= others
		})
		st := partitionStats(h.node)
		t.Logf("while stuck: %d acked, %d pending, %d parked, paused %v", sink.AckedCount(), st.Pending, st.Parked, st.Paused)
		if st.Parked < int64(n/stuckEvery-window) {
			t.Errorf("%d records parked, want at least %d: the stuck key's records beyond the window must be parked", st.Parked, n/stuckEvery-window)
		}

		once.Do(func() { close(release) })
		sink.WaitAcked(t, n, 2*time.Minute)
		testutil.WaitCommitted(t, testutil.Admin(t, brokers), sub.GroupID(), ends, 60*time.Second)
		if v := sink.KeyOrderViolations(); len(v) > 0 {
			t.Fatalf("%d per-key order violations, first: %s", len(v), v[0])
		}
		if d := sink.Duplicates(); d != 0 {
			t.Errorf("%d duplicates, want 0", d)
		}
		st = partitionStats(h.node)
		if st.Parked != 0 || st.Reread == 0 {
			t.Errorf("after the release: %d parked, %d records read again; want 0 parked and some read again", st.Parked, st.Reread)
		}
		t.Logf("after the release: %d records read again to take back the parked ones", st.Reread)
	})
}

// partitionStats returns the stats of the node's only partition.
func partitionStats(n *dispatcher.Node) dispatcher.PartitionStats {
	for _, g := range n.Stats() {
		for _, p := range g.Partitions {
			return p
		}
	}
	return dispatcher.PartitionStats{}
}

// Conflation: while a key's record is in flight, its later records
// supersede each other; when it is answered only the newest goes, the
// others are acked without delivery, and the commit reaches the log end.
func TestConflatingSubscriptionDeliversOnlyAKeysNewestRecord(t *testing.T) {
	testutil.KafkaTiers(t, 1, []string{"conflate"}, func(t *testing.T, brokers []string) {
		topic := "conflate"
		if !strings.HasSuffix(t.Name(), "/kfake") {
			topic = testutil.UniqueTopic("conflate")
			testutil.CreateTopics(t, brokers, 1, topic)
		}
		rdb := testutil.StartRedis(t).Client()
		sink := testutil.StartSink(t)
		release := make(chan struct{})
		var once sync.Once
		defer once.Do(func() { close(release) })
		sink.Latency = func(d *testutil.Delivery) time.Duration {
			if d.Offset == 0 {
				<-release
			}
			return 0
		}
		const n = 300
		ends := produce(t, brokers, topic, n, func(int) string { return "state" }, func(int) int32 { return 0 })
		sub := newSub("conflate", topic, sink.URL, subscription.OrderKey, 4)
		sub.Conflate = true
		startNode(t, brokers, rdb, []*subscription.Subscription{sub}, nil)
		testutil.WaitFor(t, 30*time.Second, "the first record in flight", func() bool { return sink.InFlight() == 1 })
		time.Sleep(500 * time.Millisecond) // the rest is read meanwhile
		once.Do(func() { close(release) })
		testutil.WaitCommitted(t, testutil.Admin(t, brokers), sub.GroupID(), ends, 30*time.Second)
		var got []int64
		for _, d := range sink.Deliveries() {
			got = append(got, d.Offset)
		}
		if len(got) != 2 || got[0] != 0 || got[1] != n-1 {
			t.Fatalf("delivered offsets %v, want [0 %d]: the first, then only the newest", got, n-1)
		}
	})
}
