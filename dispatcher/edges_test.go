package dispatcher_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
)

// A claim refused because the tracking state holds a fresh claim of a
// newer generation (a group recreated, a stale owner record) is retried
// with backoff: the partition is reported assigned but unclaimed meanwhile,
// and is delivered as soon as the other claim goes away.
func TestFencedClaimIsRetriedUntilItSucceeds(t *testing.T) {
	brokers := testutil.Kfake(t, 1, "fenced")
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	sub := newSub("fenced", "fenced", sink.URL, subscription.OrderKey, 8)
	// The node's claims count a claim of a newer generation as stale 4 s
	// after its last update.
	const stale = 4 * time.Second
	store, err := tracking.New(rdb, tracking.Config{StaleClaim: stale})
	if err != nil {
		t.Fatal(err)
	}
	pk := tracking.PartitionKey{Subscription: sub.ID, Topic: "fenced", Partition: 0}
	if _, err := store.ClaimRanges(context.Background(), pk, "ghost", 1<<30, "", nil); err != nil {
		t.Fatal(err)
	}
	ghostAt := time.Now()
	produce(t, brokers, "fenced", 50, func(i int) string { return fmt.Sprintf("k%d", i%5) }, func(int) int32 { return 0 })
	h := startNodeTracking(t, brokers, store, staticSubs{sub}, nil)

	deadline := time.Now().Add(20 * time.Second)
	var owned []dispatcher.Ownership
	for time.Now().Before(deadline) {
		if owned = h.node.Owned(); len(owned) == 1 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(owned) != 1 || owned[0].Claimed {
		t.Fatalf("owned = %+v; want the partition assigned and not claimed", owned)
	}
	if n := sink.AckedCount(); n != 0 && time.Since(ghostAt) < stale {
		t.Fatalf("%d records delivered while another claim is in force", n)
	}
	// The ghost's claim goes stale: the node's next try claims.
	sink.WaitAcked(t, 50, 30*time.Second)
	if owned = h.node.Owned(); len(owned) != 1 || !owned[0].Claimed {
		t.Fatalf("owned = %+v after the claim; want claimed", owned)
	}
}

// An endpoint outage fills every partition's window; the node's byte
// budget bounds what all of them hold together, so the node cannot grow
// past its memory limit however many partitions it owns.
func TestBufferedBytesAreBoundedPerNode(t *testing.T) {
	brokers := testutil.Kfake(t, 4, "outage")
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	sink.Status = func(*testutil.Delivery) int { return 503 }
	const valueBytes, budget = 1024, 64 << 10
	produceValues(t, brokers, "outage", 400, valueBytes)
	sub := newSub("outage", "outage", sink.URL, subscription.OrderKey, 4)
	h := startNode(t, brokers, rdb, []*subscription.Subscription{sub}, func(c *dispatcher.Config) {
		c.MaxBufferedBytes = budget
	})
	// Every partition gets records until the budget is used up.
	deadline := time.Now().Add(20 * time.Second)
	peak, owned := int64(0), 0
	for time.Now().Before(deadline) {
		var pending int64
		for _, g := range h.node.Stats() {
			owned = len(g.Partitions)
			for _, p := range g.Partitions {
				// Parked records hold no value: only those in memory count.
				pending += p.Pending - p.Parked
			}
		}
		peak = max(peak, pending)
		if b := h.node.BufferedBytes(); b > budget {
			t.Fatalf("node holds %d bytes, budget %d", b, budget)
		}
		time.Sleep(20 * time.Millisecond)
		if time.Until(deadline) < 15*time.Second && owned == 4 && pending > 0 {
			break
		}
	}
	if limit := int64(budget / valueBytes); peak > limit || peak == 0 {
		t.Fatalf("%d records held at the peak over %d partitions; want 1..%d (the budget)", peak, owned, limit)
	}
}

// produceValues writes n records of valueBytes each over the topic's
// partitions, 10 keys per partition.
func produceValues(t *testing.T, brokers []string, topic string, n, valueBytes int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var rs []*kgo.Record
	for i := range n {
		rs = append(rs, &kgo.Record{Topic: topic, Partition: int32(i % 4), Key: fmt.Appendf(nil, "k%d", i%40), Value: make([]byte, valueBytes)})
	}
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}
