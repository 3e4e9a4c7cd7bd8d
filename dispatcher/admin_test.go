package dispatcher_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
	"github.com/keyhook/keyhook/webhooks"
)

func newAdminFor(t *testing.T, brokers []string, store *subscription.Store, tracker *tracking.Store) *dispatcher.Admin {
	t.Helper()
	sender, err := webhooks.NewClient(webhooks.ClientConfig{Policy: webhooks.AddressPolicy{AllowPrivate: true}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := dispatcher.NewAdmin([]kgo.Opt{kgo.SeedBrokers(brokers...)}, store, tracker, sender,
		dispatcher.AdminConfig{Retry: webhooks.RetryPolicy{InitialInterval: 10 * time.Millisecond, MaxInterval: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a
}

// Seek to a timestamp, applied while the subscription runs: the node
// drains and leaves, the commit moves back, the acked ranges are
// forgotten, and exactly the records from that time on are delivered
// again, each once more.
func TestSeekToTimestampRedeliversExactlyFromThere(t *testing.T) {
	kafkaTiers(t, 2, []string{"seek"}, func(t *testing.T, brokers []string) {
		topic := "seek"
		if !strings.HasSuffix(t.Name(), "/kfake") {
			topic = uniqueTopic(t, "seek")
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
	startNodeWith(t, brokers, rdb, store, nil)
	sink.WaitAcked(t, n, 30*time.Second)
	waitCommitted(t, newAdmin(t, brokers), sub.GroupID(), map[int32]int64{0: n / 2, 1: n / 2}, 30*time.Second)

	admin := newAdminFor(t, brokers, store, tracker)
	res, err := admin.Seek(context.Background(), sub, subscription.SeekRequest{To: subscription.SeekTimestamp, Timestamp: base.Add(from * time.Second)})
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

// Dead letters are listed page by page with why they failed, and a
// redrive delivers the chosen ones again with their delivery ids.
func TestDeadLettersListAndRedrive(t *testing.T) {
	brokers := testutil.Kfake(t, 1, "dl")
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	var healed atomic.Bool
	sink.Status = func(d *testutil.Delivery) int {
		if d.Offset%10 == 3 && !healed.Load() {
			return http.StatusUnprocessableEntity
		}
		return http.StatusOK
	}
	produce(t, brokers, "dl", 40, func(i int) string { return fmt.Sprintf("k%d", i%4) }, func(int) int32 { return 0 })
	store, err := subscription.New(rdb, subscription.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tracker, err := tracking.New(rdb, tracking.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sub := &subscription.Subscription{Name: "dl", Topics: []string{"dl"}, Endpoint: subscription.Endpoint{URL: sink.URL}, MaxInFlight: 8}
	if err := store.Create(context.Background(), sub); err != nil {
		t.Fatal(err)
	}
	startNodeWith(t, brokers, rdb, store, nil)
	waitCommitted(t, newAdmin(t, brokers), sub.GroupID(), map[int32]int64{0: 40}, 30*time.Second)
	admin := newAdminFor(t, brokers, store, tracker)

	first, err := admin.DeadLetters(context.Background(), sub, 3, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Items) != 3 || first.NextCursor == "" {
		t.Fatalf("first page: %d items, cursor %q; want 3 and a cursor", len(first.Items), first.NextCursor)
	}
	second, err := admin.DeadLetters(context.Background(), sub, 3, first.NextCursor)
	if err != nil {
		t.Fatal(err)
	}
	items := append(first.Items, second.Items...)
	// Dead letters come in the order they failed: keys fail concurrently.
	sort.Slice(items, func(i, j int) bool { return items[i].Offset < items[j].Offset })
	if len(items) != 4 {
		t.Fatalf("%d dead letters over two pages, want 4 (offsets 3, 13, 23, 33)", len(items))
	}
	for i, d := range items {
		wantOffset := int64(i*10 + 3)
		if d.Offset != wantOffset || d.Status != 422 || d.Attempts != 1 || d.Topic != "dl" ||
			d.ID != dispatcher.DeliveryID(sub.ID, "dl", 0, wantOffset) || d.DeadLetterTopic != "dl.keyhook.dlq" {
			t.Errorf("dead letter %d = %+v", i, d)
		}
	}
	if _, err := admin.DeadLetters(context.Background(), sub, 3, "garbage"); err == nil {
		t.Errorf("a made-up cursor was accepted")
	}

	healed.Store(true)
	before := len(sink.Deliveries())
	n, err := admin.Redrive(context.Background(), sub, []string{items[1].ID, items[3].ID})
	if err != nil || n != 2 {
		t.Fatalf("redrive = %d, %v; want 2", n, err)
	}
	var ids []string
	for _, d := range sink.Deliveries()[before:] {
		ids = append(ids, d.ID)
	}
	sort.Strings(ids)
	want := []string{items[1].ID, items[3].ID}
	sort.Strings(want)
	if len(ids) != 2 || ids[0] != want[0] || ids[1] != want[1] {
		t.Errorf("redrive sent %v, want %s and %s", ids, items[1].ID, items[3].ID)
	}
}

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
	waitCommitted(t, newAdmin(t, brokers), sub.GroupID(), ends, 30*time.Second)
	if d := sink.Duplicates(); d != 0 {
		t.Errorf("%d duplicates across a graceful pause and resume on two nodes, want 0", d)
	}
	t.Logf("paused after %d of %d deliveries on two nodes", at, n)
}
