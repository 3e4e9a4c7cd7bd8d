package control_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/control"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
)

// Seek to a timestamp, applied while the subscription runs: the node
// drains and leaves, the commit moves back, the acked ranges are
// forgotten, and exactly the records from that time on are delivered
// again, each once more.
func TestSeekToTimestampRedeliversExactlyFromThere(t *testing.T) {
	testutil.KafkaTiers(t, 2, []string{"seek"}, func(t *testing.T, brokers []string) {
		topic := "seek"
		if !strings.HasSuffix(t.Name(), "/kfake") {
			topic = fmt.Sprintf("seek-%d", time.Now().UnixNano())
			testutil.CreateTopics(t, brokers, 2, topic)
		}
		testSeek(t, brokers, topic)
	})
}

func testSeek(t *testing.T, brokers []string, topic string) {
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	const n, from = 100, 60
	for i := range n {
		rec := &kgo.Record{Topic: topic, Partition: int32(i % 2), Key: fmt.Appendf(nil, "k%d", i%5),
			Value: fmt.Appendf(nil, "%d", i), Timestamp: base.Add(time.Duration(i) * time.Second)}
		if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	store, err := subscription.New(rdb, subscription.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tracker, err := tracking.New(rdb, tracking.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sub := &subscription.Subscription{Name: "seek", Topics: []string{topic}, Endpoint: subscription.Endpoint{URL: sink.URL}, MaxInFlight: 8}
	if err := store.Create(context.Background(), sub); err != nil {
		t.Fatal(err)
	}
	startNode(t, brokers, rdb, store)
	sink.WaitAcked(t, n, 30*time.Second)
	testutil.WaitCommitted(t, testutil.Admin(t, brokers), sub.GroupID(), map[int32]int64{0: n / 2, 1: n / 2}, 30*time.Second)

	seeker, err := control.NewSeeker(testutil.Admin(t, brokers), store, tracker, control.SeekConfig{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := seeker.Seek(context.Background(), sub, subscription.SeekRequest{To: subscription.SeekTimestamp, Timestamp: base.Add(from * time.Second)})
	if err != nil {
		t.Fatalf("seek: %v", err)
	}
	for _, p := range res.Partitions {
		if p.Previous != n/2 || p.Offset != from/2 {
			t.Errorf("partition %d moved %d -> %d, want %d -> %d", p.Partition, p.Previous, p.Offset, n/2, from/2)
		}
	}
	want := n + (n - from)
	deadline := time.Now().Add(30 * time.Second)
	for len(sink.Deliveries()) < want && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // anything beyond would show now
	again := map[string]int{}
	for _, d := range sink.Deliveries() {
		again[string(d.Body)]++
	}
	for i := range n {
		wantCount := 1
		if i >= from {
			wantCount = 2
		}
		if got := again[fmt.Sprint(i)]; got != wantCount {
			t.Errorf("record %d delivered %d times, want %d", i, got, wantCount)
		}
	}
	got, err := store.Get(context.Background(), sub.ID)
	if err != nil || got.Paused {
		t.Errorf("after the seek the subscription is paused=%v (err %v), want it running", got != nil && got.Paused, err)
	}
}
