package control_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/control"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
)

// A seek of one partition forgets what was acked on that partition only:
// another partition, whose commit is held back by a record still
// retrying, resumes at its commit and skips the records it acked above
// it instead of delivering them again.
func TestSeekOfOnePartitionKeepsTheOthersAcked(t *testing.T) {
	brokers := testutil.Kfake(t, 2, "partial")
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	var blocked atomic.Bool
	blocked.Store(true)
	sink.Status = func(d *testutil.Delivery) int {
		if d.Key == "stuck" && blocked.Load() {
			return 503
		}
		return 200
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	recs = append(recs, &kgo.Record{Topic: "partial", Partition: 1, Key: []byte("stuck"), Value: []byte("stuck")})
	for i := 1; i < 20; i++ {
		recs = append(recs, &kgo.Record{Topic: "partial", Partition: 1, Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "p1-%d", i)})
	}
	for i := range 10 {
		recs = append(recs, &kgo.Record{Topic: "partial", Partition: 0, Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "p0-%d", i)})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	store, err := subscription.New(rdb, subscription.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tracker, err := tracking.New(rdb, tracking.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sub := &subscription.Subscription{Name: "partial", Topics: []string{"partial"}, Endpoint: subscription.Endpoint{URL: sink.URL},
		MaxInFlight: 8, Retry: subscription.RetryPolicy{MaxAttempts: 0, MaxElapsedMS: 3600_000}}
	if err := store.Create(context.Background(), sub); err != nil {
		t.Fatal(err)
	}
	startNode(t, brokers, rdb, store)
	sink.WaitAcked(t, 29, 30*time.Second)
	time.Sleep(300 * time.Millisecond) // the acks reach Redis

	seeker, err := control.NewSeeker(testutil.Admin(t, brokers), store, tracker, control.SeekConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := seeker.Seek(context.Background(), sub, subscription.SeekRequest{To: subscription.SeekOffsets,
		Offsets: []subscription.SeekOffset{{Topic: "partial", Partition: 0, Offset: 0}}}); err != nil {
		t.Fatalf("seek: %v", err)
	}
	blocked.Store(false)
	sink.WaitAcked(t, 30, 30*time.Second)
	testutil.WaitCommitted(t, testutil.Admin(t, brokers), sub.GroupID(), map[int32]int64{0: 10, 1: 20}, 30*time.Second)

	again := 0
	p0 := 0
	for _, d := range sink.Deliveries() {
		switch {
		case d.Partition == 1 && d.Offset > 0 && d.Status == 200:
			again++
		case d.Partition == 0 && d.Status == 200:
			p0++
		}
	}
	if again != 19 {
		t.Errorf("partition 1 (not sought): %d deliveries of its 19 acked records, want 19 (no redelivery)", again)
	}
	if p0 != 20 {
		t.Errorf("partition 0 (sought to 0): %d deliveries, want 20 (each record again)", p0)
	}
}
