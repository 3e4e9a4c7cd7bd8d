package deadletter_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
)

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
	values := make([]string, 40)
	for i := range values {
		values[i] = fmt.Sprint(i)
	}
	produce(t, brokers, "dl", nil, values...)
	store := subscription.NewStore(rdb, "")
	sub := &subscription.Subscription{Name: "dl", Topics: []string{"dl"}, Endpoint: subscription.Endpoint{URL: sink.URL}, MaxInFlight: 8}
	if err := store.Create(context.Background(), sub); err != nil {
		t.Fatal(err)
	}
	startNode(t, brokers, rdb, store)
	waitCommitted(t, newAdminClient(t, brokers), sub.GroupID(), map[int32]int64{0: 40}, 30*time.Second)
	admin := newReader(t, brokers)

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
