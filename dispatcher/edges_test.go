package dispatcher_test

import (
	"context"
	"fmt"
	"testing"
	"time"

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
	if _, err := store.Claim(context.Background(), pk, "ghost", 1<<30); err != nil {
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
