package deadletter_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/deadletter"
	"github.com/keyhook/keyhook/internal/testutil"
)

// readAll reads n records of topic from its start.
func readAll(t *testing.T, brokers []string, topic string, n int) []*kgo.Record {
	t.Helper()
	cl := newClient(t, brokers, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	if len(out) != n {
		t.Fatalf("read %d records of %s, want %d", len(out), topic, n)
	}
	return out
}

func headers(hs []kgo.RecordHeader) [][2]string {
	out := make([][2]string, len(hs))
	for i, h := range hs {
		out[i] = [2]string{h.Key, string(h.Value)}
	}
	return out
}

func letter(r *kgo.Record) deadletter.Letter {
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	return deadletter.Letter{
		Subscription: "sub_a", Record: r, Topic: "orders.dlq", DeliveryID: "dlv_real",
		Status: 400, Attempts: 1, First: at, Last: at,
	}
}

// A dead letter carries the record's own headers and then exactly one
// block of keyhook's: keyhook-* headers the record came with (forged by a
// producer) are not copied, so they cannot pass for keyhook's.
func TestWriteDropsTheRecordsOwnKeyhookHeaders(t *testing.T) {
	brokers := testutil.Kfake(t, 1, "orders.dlq")
	w := deadletter.NewWriter(newClient(t, brokers), deadletter.WriterConfig{})
	src := &kgo.Record{Topic: "orders", Partition: 2, Offset: 7, Key: []byte("k"), Value: []byte("v"),
		Headers: []kgo.RecordHeader{
			{Key: "origin", Value: []byte("test")},
			{Key: deadletter.HeaderSubscription, Value: []byte("sub_b")},
			{Key: deadletter.HeaderDeliveryID, Value: []byte("dlv_forged")},
			{Key: deadletter.HeaderTopic, Value: []byte("payments")},
			{Key: "trace", Value: []byte("t1")},
		}}
	if err := w.Write(context.Background(), letter(src)); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, brokers, "orders.dlq", 1)[0]
	want := [][2]string{
		{"origin", "test"}, {"trace", "t1"},
		{deadletter.HeaderSubscription, "sub_a"},
		{deadletter.HeaderTopic, "orders"},
		{deadletter.HeaderPartition, "2"},
		{deadletter.HeaderOffset, "7"},
		{deadletter.HeaderDeliveryID, "dlv_real"},
		{deadletter.HeaderStatus, "400"},
		{deadletter.HeaderError, ""},
		{deadletter.HeaderAttempts, "1"},
		{deadletter.HeaderFirstAttempt, "2030-01-02T03:04:05Z"},
		{deadletter.HeaderLastAttempt, "2030-01-02T03:04:05Z"},
	}
	if diff := cmp.Diff(want, headers(got.Headers)); diff != "" {
		t.Errorf("dead-letter headers (-want +got):\n%s", diff)
	}
	if string(got.Key) != "k" || string(got.Value) != "v" {
		t.Errorf("dead letter key %q value %q, want the record's", got.Key, got.Value)
	}
}
