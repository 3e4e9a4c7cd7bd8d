package dispatcher_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
)

// Pause through the subscription store reaches every node: two nodes
// sharing a subscription both stop delivering within 2 s, and resume
// carries on without losing or repeating a record.
func TestPauseReachesEveryNodeWithin2Seconds(t *testing.T) {
	brokers := testutil.Kfake(t, 4, "pause-all")
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	sink.Latency = func(*testutil.Delivery) time.Duration { return 5 * time.Millisecond }
	const n = 6000
	ends := produce(t, brokers, "pause-all", n, func(i int) string { return fmt.Sprintf("k%d", i%40) }, func(i int) int32 { return int32(i % 4) })
	store, err := subscription.New(rdb, subscription.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sub := &subscription.Subscription{Name: "pause-all", Topics: []string{"pause-all"}, Endpoint: subscription.Endpoint{URL: sink.URL}, MaxInFlight: 4}
	if err := store.Create(context.Background(), sub); err != nil {
		t.Fatal(err)
	}
	a := startNodeWith(t, brokers, rdb, store, nil)
	b := startNodeWith(t, brokers, rdb, store, nil)
	deadline := time.Now().Add(30 * time.Second)
	for len(a.node.Owned()) == 0 || len(b.node.Owned()) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("both nodes never owned partitions: a %v, b %v", a.node.Owned(), b.node.Owned())
		}
		time.Sleep(20 * time.Millisecond)
	}
	sink.WaitAcked(t, 500, time.Minute)

	if _, err := store.Update(context.Background(), sub.ID, subscription.AnyVersion, func(s *subscription.Subscription) error {
		s.Paused = true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	at := len(sink.Deliveries())
	time.Sleep(time.Second)
	if after := len(sink.Deliveries()); after != at {
		t.Fatalf("%d deliveries between 2 s and 3 s after the pause, want 0", after-at)
	}
	if at >= n {
		t.Fatalf("everything was delivered before the pause; the test proves nothing")
	}
	if len(a.node.Owned())+len(b.node.Owned()) != 0 {
		t.Errorf("paused nodes still own partitions: a %v, b %v", a.node.Owned(), b.node.Owned())
	}
	if _, err := store.Update(context.Background(), sub.ID, subscription.AnyVersion, func(s *subscription.Subscription) error {
		s.Paused = false
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sink.WaitAcked(t, n, time.Minute)
	testutil.WaitCommitted(t, testutil.Admin(t, brokers), sub.GroupID(), ends, 30*time.Second)
	if d := sink.Duplicates(); d != 0 {
		t.Errorf("%d duplicates across a graceful pause and resume on two nodes, want 0", d)
	}
	t.Logf("paused after %d of %d deliveries on two nodes", at, n)
}
