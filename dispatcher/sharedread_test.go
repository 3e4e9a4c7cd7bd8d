package dispatcher_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
)

// sharedRead sets a node to read shared, with a meter the test reads.
func sharedRead(reader *sdkmetric.ManualReader, window int64) func(*dispatcher.Config) {
	return func(c *dispatcher.Config) {
		c.SharedRead = true
		if reader != nil {
			c.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		}
		if window > 0 {
			c.MaxWindow = window
		}
	}
}

// checkSink fails t when the sink saw a key out of order, a duplicate,
// or missed a record of topic below ends.
func checkSink(t *testing.T, name string, sink *testutil.Sink, topic string, ends map[int32]int64) {
	t.Helper()
	if v := sink.KeyOrderViolations(); len(v) > 0 {
		t.Errorf("%s: %d per-key order violations, first: %s", name, len(v), v[0])
	}
	if d := sink.Duplicates(); d != 0 {
		t.Errorf("%s: %d duplicates without any failure, want 0", name, d)
	}
	checkDelivered(t, sink, topic, ends)
}

// Three subscriptions on one topic, one node reading shared: each gets
// every record once, in key order, and commits under its own group id;
// the node fetched each record once, not once per subscription.
func TestSharedReadFetchesOnceForEverySubscription(t *testing.T) {
	testutil.KafkaTiers(t, 4, []string{"shared"}, func(t *testing.T, brokers []string) {
		topic := "shared"
		if t.Name() != "TestSharedReadFetchesOnceForEverySubscription/kfake" {
			topic = testutil.UniqueTopic("shared")
			testutil.CreateTopics(t, brokers, 4, topic)
		}
		rdb := testutil.StartRedis(t).Client()
		const n = 3000
		keyOf := func(i int) string { return fmt.Sprintf("key-%d", i%100) }
		partOf := func(i int) int32 { return int32(i % 100 % 4) }

		var sinks []*testutil.Sink
		var subs []*subscription.Subscription
		for i := range 3 {
			sink := testutil.StartSink(t)
			sinks = append(sinks, sink)
			subs = append(subs, newSub(fmt.Sprintf("shared-%d", i), topic, sink.URL, subscription.OrderKey, 32))
		}
		metrics := sdkmetric.NewManualReader()
		h := startNode(t, brokers, rdb, subs, sharedRead(metrics, 0))
		// Every cursor attached before the records come: one that started
		// behind the reader would catch up on a read of its own (a loaded
		// machine got two of three so), which this test is not about.
		testutil.WaitFor(t, 60*time.Second, "every subscription's 4 partitions claimed on the shared read", func() bool {
			attached := 0
			for _, o := range h.node.Owned() {
				if o.Claimed && !o.CatchingUp {
					attached++
				}
			}
			return attached == 3*4
		})
		ends := produce(t, brokers, topic, n, keyOf, partOf)
		adm := testutil.Admin(t, brokers)
		for i, sink := range sinks {
			sink.WaitAcked(t, n, 2*time.Minute)
			testutil.WaitCommitted(t, adm, subs[i].GroupID(), ends, 30*time.Second)
			checkSink(t, subs[i].ID, sink, topic, ends)
		}
		fetched := testutil.Int64Metric(t, metrics, "keyhook.reader.records.fetched")
		offered := testutil.Int64Metric(t, metrics, "keyhook.records.fetched")
		t.Logf("reader fetched %d records; the subscriptions were offered %d", fetched, offered)
		if fetched < n || fetched > n+n/10 {
			t.Errorf("the reader fetched %d records for %d produced, want each once (three subscriptions share one read)", fetched, n)
		}
		if offered < 3*n {
			t.Errorf("the subscriptions were offered %d records, want %d (every record to each); %d cursor detaches, %d records caught up on reads of their own",
				offered, 3*n, testutil.Int64Metric(t, metrics, "keyhook.cursor.detaches"), testutil.Int64Metric(t, metrics, "keyhook.records.caught_up"))
		}
	})
}

// A subscription whose endpoint is slow falls behind without holding the
// read: it leaves the shared stream and catches up on its own, while the
// other subscription delivers everything first; then the slow one
// delivers everything too, in key order.
func TestSharedReadLaggingSubscriptionDoesNotHoldTheOthers(t *testing.T) {
	brokers := testutil.Kfake(t, 2, "lag")
	rdb := testutil.StartRedis(t).Client()
	const n = 4000
	keyOf := func(i int) string { return fmt.Sprintf("key-%d", i%40) }
	partOf := func(i int) int32 { return int32(i % 40 % 2) }

	fast, slow := testutil.StartSink(t), testutil.StartSink(t)
	slow.Latency = func(*testutil.Delivery) time.Duration { return 20 * time.Millisecond }
	fastSub := newSub("lag-fast", "lag", fast.URL, subscription.OrderKey, 64)
	slowSub := newSub("lag-slow", "lag", slow.URL, subscription.OrderKey, 4)
	metrics := sdkmetric.NewManualReader()
	var noticeMu sync.Mutex
	notices := map[string]int{}
	startNode(t, brokers, rdb, []*subscription.Subscription{fastSub, slowSub}, func(c *dispatcher.Config) {
		sharedRead(metrics, 100)(c)
		c.CursorDetached = func(sub, topic string, partition int32, behind int64, reason string) {
			noticeMu.Lock()
			defer noticeMu.Unlock()
			notices[fmt.Sprintf("%s %s/%d", sub, topic, partition)]++
		}
		// Without parking the slow subscription's window fills and stays
		// full (with it, its keys would park their tails by offset and
		// take the stream all the same).
		c.ParkAfter = new(0)
	})
	// In waves, so the reader hands out batch after batch while the slow
	// subscription's window is full.
	// The catch-up lag gauge, sampled after each wave, says how far the
	// detached cursor is behind the reader.
	ends := map[int32]int64{}
	var catchupLag int64
	for range 8 {
		for p, e := range produce(t, brokers, "lag", n/8, keyOf, partOf) {
			ends[p] = e
		}
		time.Sleep(100 * time.Millisecond)
		catchupLag = max(catchupLag, testutil.Int64Metric(t, metrics, "keyhook.cursor.catchup.lag"))
	}

	fast.WaitAcked(t, n, 2*time.Minute)
	catchupLag = max(catchupLag, testutil.Int64Metric(t, metrics, "keyhook.cursor.catchup.lag"))
	slowDone := slow.AckedCount()
	t.Logf("when the fast subscription had all %d records, the slow one had %d", n, slowDone)
	if slowDone > n/2 {
		t.Errorf("the slow subscription had %d of %d records when the fast one finished: the test did not make it lag", slowDone, n)
	}
	if d := testutil.Int64Metric(t, metrics, "keyhook.cursor.detaches"); d == 0 {
		t.Errorf("no cursor left the shared read, want the slow one to")
	}
	if catchupLag == 0 {
		t.Errorf("keyhook.cursor.catchup.lag never showed a cursor behind the reader, want the slow one's lag")
	}
	// The fast one may fall behind for a moment on a loaded machine too;
	// the slow one must, and each partition is told of once at most.
	noticeMu.Lock()
	slowTold := false
	for what, times := range notices {
		slowTold = slowTold || strings.HasPrefix(what, "lag-slow ")
		if times != 1 {
			t.Errorf("told %d times of %s falling behind, want once within ten minutes", times, what)
		}
	}
	if !slowTold {
		t.Errorf("never told of the slow subscription falling behind (Config.CursorDetached); told of %v", notices)
	}
	noticeMu.Unlock()
	slow.WaitAcked(t, n, 3*time.Minute)
	if c := testutil.Int64Metric(t, metrics, "keyhook.records.caught_up"); c == 0 {
		t.Errorf("no record was read on a catch-up, want the slow subscription's")
	}
	checkSink(t, "fast", fast, "lag", ends)
	checkSink(t, "slow", slow, "lag", ends)
}

// A subscription added while the reader runs, starting at the earliest
// offset, catches up from there on its own and then shares the read; the
// subscription already running is not sent anything again.
func TestSharedReadNewSubscriptionCatchesUp(t *testing.T) {
	brokers := testutil.Kfake(t, 2, "late")
	rdb := testutil.StartRedis(t).Client()
	const n = 1000
	keyOf := func(i int) string { return fmt.Sprintf("key-%d", i%20) }
	partOf := func(i int) int32 { return int32(i % 20 % 2) }
	produce(t, brokers, "late", n, keyOf, partOf)

	first, second := testutil.StartSink(t), testutil.StartSink(t)
	a := newSub("late-a", "late", first.URL, subscription.OrderKey, 32)
	b := newSub("late-b", "late", second.URL, subscription.OrderKey, 32)
	subs := make(feed, 1)
	subs <- []*subscription.Subscription{a}
	metrics := sdkmetric.NewManualReader()
	startNodeWith(t, brokers, rdb, subs, sharedRead(metrics, 0))
	first.WaitAcked(t, n, time.Minute)

	subs <- []*subscription.Subscription{a, b}
	second.WaitAcked(t, n, time.Minute)
	ends := produce(t, brokers, "late", n, keyOf, partOf)
	first.WaitAcked(t, 2*n, time.Minute)
	second.WaitAcked(t, 2*n, time.Minute)
	adm := testutil.Admin(t, brokers)
	testutil.WaitCommitted(t, adm, a.GroupID(), ends, 30*time.Second)
	testutil.WaitCommitted(t, adm, b.GroupID(), ends, 30*time.Second)
	checkSink(t, "first", first, "late", ends)
	checkSink(t, "second", second, "late", ends)
	if c := testutil.Int64Metric(t, metrics, "keyhook.records.caught_up"); c < n {
		t.Errorf("%d records read on a catch-up, want the new subscription's %d at least", c, n)
	}
}

// Two nodes reading shared split the partitions through the reader
// group; the second node joining hands partitions over gracefully, so
// every record of both subscriptions arrives once, in key order.
func TestSharedReadHandsPartitionsOverBetweenNodes(t *testing.T) {
	testutil.KafkaTiers(t, 4, []string{"handover"}, func(t *testing.T, brokers []string) {
		topic := "handover"
		if t.Name() != "TestSharedReadHandsPartitionsOverBetweenNodes/kfake" {
			topic = testutil.UniqueTopic("handover")
			testutil.CreateTopics(t, brokers, 4, topic)
		}
		rdb := testutil.StartRedis(t).Client()
		const n = 4000
		keyOf := func(i int) string { return fmt.Sprintf("key-%d", i%80) }
		partOf := func(i int) int32 { return int32(i % 80 % 4) }
		sinkA, sinkB := testutil.StartSink(t), testutil.StartSink(t)
		for _, s := range []*testutil.Sink{sinkA, sinkB} {
			s.Latency = func(*testutil.Delivery) time.Duration { return 2 * time.Millisecond }
		}
		subs := []*subscription.Subscription{
			newSub("handover-a", topic, sinkA.URL, subscription.OrderKey, 16),
			newSub("handover-b", topic, sinkB.URL, subscription.OrderKey, 16),
		}
		ends := produce(t, brokers, topic, n/2, keyOf, partOf)
		startNode(t, brokers, rdb, subs, sharedRead(nil, 0))
		sinkA.WaitAcked(t, n/4, time.Minute)
		startNode(t, brokers, rdb, subs, sharedRead(nil, 0))
		for p, e := range produce(t, brokers, topic, n/2, keyOf, partOf) {
			ends[p] = e
		}
		sinkA.WaitAcked(t, n, 2*time.Minute)
		sinkB.WaitAcked(t, n, 2*time.Minute)
		adm := testutil.Admin(t, brokers)
		for i, s := range []*testutil.Sink{sinkA, sinkB} {
			testutil.WaitCommitted(t, adm, subs[i].GroupID(), ends, 30*time.Second)
			checkSink(t, subs[i].ID, s, topic, ends)
			if o := s.KeyOverlaps(); len(o) > 0 {
				t.Errorf("%s: %d keys had two requests in flight at once, first %s", subs[i].ID, len(o), o[0])
			}
		}
	})
}

// More subscriptions start behind the reader at once than a node runs
// catch-ups (72 partitions to catch up, 32 passes at a time): those
// without a pass wait for one, and every subscription gets every record.
func TestSharedReadCatchUpsWaitForASlot(t *testing.T) {
	brokers := testutil.Kfake(t, 2, "burst")
	rdb := testutil.StartRedis(t).Client()
	const n, late = 300, 36
	keyOf := func(i int) string { return fmt.Sprintf("key-%d", i%10) }
	partOf := func(i int) int32 { return int32(i % 10 % 2) }
	ends := produce(t, brokers, "burst", n, keyOf, partOf)

	first := testutil.StartSink(t)
	all := []*subscription.Subscription{newSub("burst-first", "burst", first.URL, subscription.OrderKey, 8)}
	subs := make(feed, 1)
	subs <- all
	metrics := sdkmetric.NewManualReader()
	startNodeWith(t, brokers, rdb, subs, sharedRead(metrics, 0))
	first.WaitAcked(t, n, time.Minute)

	var sinks []*testutil.Sink
	for i := range late {
		s := testutil.StartSink(t)
		sinks = append(sinks, s)
		all = append(all, newSub(fmt.Sprintf("burst-%d", i), "burst", s.URL, subscription.OrderKey, 8))
	}
	subs <- all
	for i, s := range sinks {
		s.WaitAcked(t, n, 2*time.Minute)
		checkSink(t, all[i+1].ID, s, "burst", ends)
	}
	if d := testutil.Int64Metric(t, metrics, "keyhook.cursor.detaches"); d < 2*late {
		t.Errorf("%d detaches, want each new subscription's %d partitions to have started behind the reader", d, 2)
	}
}

// commitHold holds, at a kfake coordinator, the first OffsetCommit of a
// group that pick chooses until letGo (or the test's end); the others
// pass.
type commitHold struct {
	held  chan struct{}
	letGo func()
}

func holdFirstCommit(t *testing.T, cluster *kfake.Cluster, pick func(group string) bool) *commitHold {
	h := &commitHold{held: make(chan struct{})}
	release := make(chan struct{})
	var holdOnce, releaseOnce sync.Once
	h.letGo = func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(h.letGo)
	cluster.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if !pick(req.(*kmsg.OffsetCommitRequest).Group) {
			return nil, nil, false
		}
		first := false
		holdOnce.Do(func() { first = true })
		if first {
			close(h.held)
			cluster.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	return h
}

// produceOne writes one record to partition 0 of topic, every one under
// the same key, so that the sink checks their order.
func produceOne(t *testing.T, brokers []string, topic string) {
	produce(t, brokers, topic, 1, func(int) string { return "key-0" }, func(int) int32 { return 0 })
}

// trickleUntilHeld produces a record every 50 ms until h holds a commit
// (a cursor commits once it delivered something), and returns how many
// it produced; what names the commit awaited, for the failure.
func trickleUntilHeld(t *testing.T, brokers []string, topic string, h *commitHold, what string) int {
	t.Helper()
	produced := 0
	for waited := time.Duration(0); ; waited += 50 * time.Millisecond {
		select {
		case <-h.held:
			return produced
		default:
		}
		if waited > 30*time.Second {
			t.Fatalf("%s committed nothing in 30s while records were delivered", what)
		}
		produceOne(t, brokers, topic)
		produced++
		time.Sleep(50 * time.Millisecond)
	}
}

// waitAckedWithin waits up to d for the sink to have acked n records,
// and returns how many it had.
func waitAckedWithin(sink *testutil.Sink, n int, d time.Duration) int {
	deadline := time.Now().Add(d)
	for sink.AckedCount() < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	return sink.AckedCount()
}

func isReaderGroup(group string) bool { return strings.HasPrefix(group, "keyhook-read-") }

// The reader group's commit waits on the group coordinator, which under
// many subscriptions' commits answered in up to half a second; the read
// must go on meanwhile. The coordinator here holds the reader group's
// commit until the test lets it go: a record produced while it is held
// is delivered all the same.
func TestSharedReadDeliversWhileTheReaderGroupCommitWaits(t *testing.T) {
	cluster := testutil.KfakeCluster(t, 1, "held")
	brokers := cluster.ListenAddrs()
	hold := holdFirstCommit(t, cluster, isReaderGroup)
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	startNode(t, brokers, rdb, []*subscription.Subscription{newSub("held", "held", sink.URL, subscription.OrderKey, 8)}, sharedRead(nil, 0))

	produced := trickleUntilHeld(t, brokers, "held", hold, "the reader group")
	produceOne(t, brokers, "held")
	produced++
	// Within the ownership lease: the held commit also holds the
	// heartbeats queued behind it on the connection, and past the lease
	// the node rightly stops delivering.
	if got := waitAckedWithin(sink, produced, 3*time.Second); got < produced {
		t.Fatalf("%d of %d records delivered 3s after the last, produced while the reader group's commit waited on the coordinator: the commit holds the read", got, produced)
	}
	hold.letGo()
	checkSink(t, "held", sink, "held", map[int32]int64{0: int64(produced)})
}

// A broker answers one connection's requests one at a time, so the
// cursors' commits must not share the reader group's connection: held
// there, they held its heartbeats too, the membership went unconfirmed
// and the node stopped delivering. The coordinator here holds a cursor's
// commit for longer than the ownership lease; records produced all along
// are delivered all along.
func TestSharedReadCursorCommitsDoNotHoldTheReaderGroupsHeartbeats(t *testing.T) {
	cluster := testutil.KfakeCluster(t, 1, "beats")
	brokers := cluster.ListenAddrs()
	hold := holdFirstCommit(t, cluster, func(group string) bool { return !isReaderGroup(group) })
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	startNode(t, brokers, rdb, []*subscription.Subscription{newSub("beats", "beats", sink.URL, subscription.OrderKey, 8)}, sharedRead(nil, 0))

	produced := trickleUntilHeld(t, brokers, "beats", hold, "the cursor")
	// Past the lease, a record every 100 ms; all checked before the
	// held commit's own 10s deadline ends it (which would free the
	// connection and hide the fault).
	held := testLease + 1500*time.Millisecond
	for end := time.Now().Add(held); time.Now().Before(end); {
		produceOne(t, brokers, "beats")
		produced++
		time.Sleep(100 * time.Millisecond)
	}
	if got := waitAckedWithin(sink, produced, 2*time.Second); got < produced {
		t.Fatalf("%d of %d records delivered 2s after the last, while a cursor's commit was held %v: the commits hold the reader group's heartbeats", got, produced, held)
	}
	hold.letGo()
	checkSink(t, "beats", sink, "beats", map[int32]int64{0: int64(produced)})
}
