package deadletter_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
)

// A node stopping while it sends a redrive leaves it queued, and the
// partition's next owner sends it: nothing is lost or stuck.
func TestRedriveCutShortByANodeStoppingGoesWithTheNextOwner(t *testing.T) {
	brokers := testutil.Kfake(t, 1, "rs")
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	const (
		refuse = iota
		hang
		accept
	)
	var phase atomic.Int32
	sink.Status = func(*testutil.Delivery) int {
		if phase.Load() == accept {
			return http.StatusOK
		}
		return http.StatusBadRequest
	}
	sink.Latency = func(*testutil.Delivery) time.Duration {
		if phase.Load() == hang {
			return time.Minute // until the node gives up on it
		}
		return 0
	}
	produce(t, brokers, "rs", nil, "dead")
	store, err := subscription.New(rdb, subscription.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sub := &subscription.Subscription{Name: "rs", Topics: []string{"rs"}, Endpoint: subscription.Endpoint{URL: sink.URL}}
	if err := store.Create(context.Background(), sub); err != nil {
		t.Fatal(err)
	}
	stopA := runNode(t, brokers, rdb, store, 200*time.Millisecond)
	testutil.WaitCommitted(t, newAdminClient(t, brokers), sub.GroupID(), map[int32]int64{0: 1}, 30*time.Second)
	r := newReader(t, brokers, rdb)

	phase.Store(hang)
	if n, err := r.Redrive(context.Background(), sub, nil); err != nil || n != 1 {
		t.Fatalf("redrive = %d, %v; want 1 queued", n, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for sink.InFlight() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the owner did not send the redrive within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopA()
	q := newQueue(t, rdb)
	if left, err := q.Next(context.Background(), sub.ID, "rs", 0, 10); err != nil || len(left) != 1 {
		t.Fatalf("after the owner stopped mid-redrive the queue holds %d (%v), want the redrive still there", len(left), err)
	}

	phase.Store(accept)
	startNode(t, brokers, rdb, store)
	deadline = time.Now().Add(30 * time.Second)
	for !sink.Acked(testutil.TP{Topic: "rs", Partition: 0}, 0) {
		if time.Now().After(deadline) {
			t.Fatal("the next owner did not send the redrive within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for {
		left, err := q.Queued(context.Background(), sub.ID)
		if err == nil && len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the delivered redrive is still queued: %v, %v", left, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
