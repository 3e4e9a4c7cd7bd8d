package deadletter_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/deadletter"
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
	store, err := subscription.New(rdb, subscription.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sub := &subscription.Subscription{Name: "dl", Topics: []string{"dl"}, Endpoint: subscription.Endpoint{URL: sink.URL}, MaxInFlight: 8}
	if err := store.Create(context.Background(), sub); err != nil {
		t.Fatal(err)
	}
	startNode(t, brokers, rdb, store)
	testutil.WaitCommitted(t, newAdminClient(t, brokers), sub.GroupID(), map[int32]int64{0: 40}, 30*time.Second)
	admin := newReader(t, brokers, rdb)

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
	waitDeliveries(t, sink, before+2, 10*time.Second)
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

// Redrive reports how many dead letters it queued again, as the API
// documents: those found and queued for their partition's owner, whether or not the endpoint takes them
// this time. One it refuses again stays a dead letter.
func TestRedriveCountsDeadLettersQueuedWhateverTheEndpointAnswers(t *testing.T) {
	brokers := testutil.Kfake(t, 1, "rq")
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	sink.Status = func(d *testutil.Delivery) int {
		if d.Offset%5 == 1 {
			return http.StatusBadRequest
		}
		return http.StatusOK
	}
	produce(t, brokers, "rq", nil, "0", "1", "2", "3", "4", "5", "6", "7", "8", "9")
	store, err := subscription.New(rdb, subscription.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sub := &subscription.Subscription{Name: "rq", Topics: []string{"rq"}, Endpoint: subscription.Endpoint{URL: sink.URL}, MaxInFlight: 4}
	if err := store.Create(context.Background(), sub); err != nil {
		t.Fatal(err)
	}
	startNode(t, brokers, rdb, store)
	testutil.WaitCommitted(t, newAdminClient(t, brokers), sub.GroupID(), map[int32]int64{0: 10}, 30*time.Second)
	r := newReader(t, brokers, rdb)

	before := len(sink.Deliveries())
	n, err := r.Redrive(context.Background(), sub, []string{dispatcher.DeliveryID(sub.ID, "rq", 0, 1), "dlv_unknown"})
	if err != nil || n != 1 {
		t.Errorf("redrive of one dead letter still refused, one unknown = %d, %v; want 1 queued", n, err)
	}
	if n, err := r.Redrive(context.Background(), sub, nil); err != nil || n != 2 {
		t.Errorf("redrive all, both still refused = %d, %v; want 2 queued", n, err)
	}
	// A 400 is final: each redriven dead letter was tried once.
	waitDeliveries(t, sink, before+3, 10*time.Second)
	time.Sleep(300 * time.Millisecond) // no fourth comes
	if got := len(sink.Deliveries()) - before; got != 3 {
		t.Errorf("the endpoint saw %d redeliveries, want 3", got)
	}
	page, err := r.DeadLetters(context.Background(), sub, 10, "")
	if err != nil || len(page.Items) != 2 {
		t.Errorf("after the redrives %d dead letters are listed (%v), want the 2 still there", len(page.Items), err)
	}
}

// A producer cannot move its record into another subscription's dead
// letters by writing keyhook's headers itself: a record carrying a forged
// keyhook-subscription naming B and a made-up delivery id, dead-lettered
// by A into a dead-letter topic A and B share, is listed as A's only, and
// cannot be redriven to B's endpoint with B's credentials.
func TestForgedDeadLetterHeadersDoNotMakeARecordAnotherSubscriptions(t *testing.T) {
	brokers := testutil.Kfake(t, 1, "orders", "payments", "shared.dlq")
	rdb := testutil.StartRedis(t).Client()
	sinkA, sinkB := testutil.StartSink(t), testutil.StartSink(t)
	sinkA.Status = func(*testutil.Delivery) int { return http.StatusBadRequest }
	store, err := subscription.New(rdb, subscription.Config{})
	if err != nil {
		t.Fatal(err)
	}
	subA := &subscription.Subscription{Name: "a", Topics: []string{"orders"}, Endpoint: subscription.Endpoint{URL: sinkA.URL}, DeadLetterTopic: "shared.dlq"}
	subB := &subscription.Subscription{Name: "b", Topics: []string{"payments"}, Endpoint: subscription.Endpoint{URL: sinkB.URL}, DeadLetterTopic: "shared.dlq"}
	for _, s := range []*subscription.Subscription{subA, subB} {
		if err := store.Create(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	produce(t, brokers, "orders", []kgo.RecordHeader{
		{Key: deadletter.HeaderSubscription, Value: []byte(subB.ID)},
		{Key: deadletter.HeaderDeliveryID, Value: []byte("dlv_forged")},
		{Key: deadletter.HeaderTopic, Value: []byte("payments")},
		{Key: deadletter.HeaderPartition, Value: []byte("0")},
		{Key: deadletter.HeaderOffset, Value: []byte("0")},
	}, `{"transfer":"to the attacker"}`)
	startNode(t, brokers, rdb, store)
	testutil.WaitCommitted(t, newAdminClient(t, brokers), subA.GroupID(), map[int32]int64{0: 1}, 30*time.Second)
	r := newReader(t, brokers, rdb)

	pageB, err := r.DeadLetters(context.Background(), subB, 10, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(pageB.Items) != 0 {
		t.Errorf("B lists %d dead letters, want none: %+v", len(pageB.Items), pageB.Items)
	}
	for _, ids := range [][]string{{"dlv_forged"}, nil} {
		if n, err := r.Redrive(context.Background(), subB, ids); err != nil || n != 0 {
			t.Errorf("redrive %v as B = %d, %v; want 0", ids, n, err)
		}
	}
	if got := sinkB.Deliveries(); len(got) != 0 {
		t.Errorf("B's endpoint received %d deliveries, want none: %s", len(got), got[0].Body)
	}
	pageA, err := r.DeadLetters(context.Background(), subA, 10, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(pageA.Items) != 1 || pageA.Items[0].ID != dispatcher.DeliveryID(subA.ID, "orders", 0, 0) || pageA.Items[0].Topic != "orders" {
		t.Errorf("A lists %+v, want its one dead letter of orders/0/0", pageA.Items)
	}
}

// A listing shows what the endpoint refused: the value as text when it is
// UTF-8, else in base64, cut to an excerpt (never inside a character) for
// a long one, with the whole value's size.
func TestDeadLettersCarryAnExcerptOfTheValue(t *testing.T) {
	brokers := testutil.Kfake(t, 1, "dlv")
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	sink.Status = func(*testutil.Delivery) int { return http.StatusUnprocessableEntity }
	long := "a" + strings.Repeat("é", subscription.DeadLetterValueExcerpt) // 2 bytes each: the cut falls inside one
	values := []string{"<img src=x onerror=alert(2)>", "\xff\xfe\x00binary", long}
	produce(t, brokers, "dlv", nil, values...)
	store, err := subscription.New(rdb, subscription.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sub := &subscription.Subscription{Name: "dlv", Topics: []string{"dlv"}, Endpoint: subscription.Endpoint{URL: sink.URL}, MaxInFlight: 8}
	if err := store.Create(context.Background(), sub); err != nil {
		t.Fatal(err)
	}
	startNode(t, brokers, rdb, store)
	testutil.WaitCommitted(t, newAdminClient(t, brokers), sub.GroupID(), map[int32]int64{0: 3}, 30*time.Second)
	page, err := newReader(t, brokers, rdb).DeadLetters(context.Background(), sub, 10, "")
	if err != nil {
		t.Fatal(err)
	}
	byOffset := map[int64]subscription.DeadLetter{}
	for _, d := range page.Items {
		byOffset[d.Offset] = d
	}
	if d := byOffset[0]; d.Value != values[0] || d.ValueBase64 != "" || d.ValueSize != len(values[0]) || d.ValueTruncated {
		t.Errorf("text value: %+v; want it as text, whole", d)
	}
	if d := byOffset[1]; d.Value != "" || d.ValueBase64 != base64.StdEncoding.EncodeToString([]byte(values[1])) || d.ValueSize != len(values[1]) {
		t.Errorf("binary value: %+v; want it in base64", d)
	}
	d := byOffset[2]
	if !d.ValueTruncated || d.ValueSize != len(long) || !utf8.ValidString(d.Value) ||
		len(d.Value) != subscription.DeadLetterValueExcerpt-1 || !strings.HasPrefix(long, d.Value) {
		t.Errorf("long value: %d bytes of excerpt, truncated %v, size %d, valid UTF-8 %v; want the first %d bytes less the cut character, of %d",
			len(d.Value), d.ValueTruncated, d.ValueSize, utf8.ValidString(d.Value), subscription.DeadLetterValueExcerpt-1, len(long))
	}
}
