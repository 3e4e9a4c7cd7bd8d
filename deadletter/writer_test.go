package deadletter_test

import (
	"context"
	"errors"
	"strings"
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
// producer, or left by a previous hop) are not copied, so they can
// neither pass for keyhook's nor pile up hop after hop.
func TestWriteDropsTheRecordsOwnKeyhookHeaders(t *testing.T) {
	brokers := testutil.Kfake(t, 1, "orders.dlq")
	w, err := deadletter.NewWriter(newClient(t, brokers), deadletter.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
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
		{deadletter.HeaderPath, "sub_a"},
	}
	if diff := cmp.Diff(want, headers(got.Headers)); diff != "" {
		t.Errorf("dead-letter headers (-want +got):\n%s", diff)
	}
	if string(got.Key) != "k" || string(got.Value) != "v" {
		t.Errorf("dead letter key %q value %q, want the record's", got.Key, got.Value)
	}
}

// A record whose dead-letter path already holds the subscription, or
// has MaxHops hops, is refused with ErrLoop and nothing is written;
// otherwise the subscription is added to the path.
func TestWriteRefusesARecordThatWouldLoop(t *testing.T) {
	for _, tt := range []struct {
		name, path string
		wantPath   string // "" when refused
	}{
		{"a source record", "", "sub_a"},
		{"another subscription's dead letter", "sub_b", "sub_b,sub_a"},
		{"three hops", "sub_b,sub_c,sub_d", "sub_b,sub_c,sub_d,sub_a"},
		{"its own dead letter", "sub_a", ""},
		{"its own dead letter further up the path", "sub_a,sub_b", ""},
		{"four hops", "sub_b,sub_c,sub_d,sub_e", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			brokers := testutil.Kfake(t, 1, "orders.dlq")
			w, err := deadletter.NewWriter(newClient(t, brokers), deadletter.WriterConfig{})
			if err != nil {
				t.Fatal(err)
			}
			src := &kgo.Record{Topic: "orders", Value: []byte("v")}
			if tt.path != "" {
				src.Headers = []kgo.RecordHeader{
					{Key: deadletter.HeaderSubscription, Value: []byte("sub_z")},
					{Key: deadletter.HeaderPath, Value: []byte(tt.path)},
				}
			}
			err = w.Write(context.Background(), letter(src))
			if tt.wantPath == "" {
				if !errors.Is(err, deadletter.ErrLoop) {
					t.Fatalf("write = %v, want ErrLoop", err)
				}
				ends, lerr := newAdminClient(t, brokers).ListEndOffsets(context.Background(), "orders.dlq")
				if e, _ := ends.Lookup("orders.dlq", 0); lerr != nil || e.Offset != 0 {
					t.Errorf("dead-letter topic ends at %d (%v) after a refused write, want 0", e.Offset, lerr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := readAll(t, brokers, "orders.dlq", 1)[0]
			var paths, subs []string
			for _, h := range got.Headers {
				switch h.Key {
				case deadletter.HeaderPath:
					paths = append(paths, string(h.Value))
				case deadletter.HeaderSubscription:
					subs = append(subs, string(h.Value))
				}
			}
			if diff := cmp.Diff([]string{tt.wantPath}, paths); diff != "" {
				t.Errorf("path headers (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"sub_a"}, subs); diff != "" {
				t.Errorf("subscription headers (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewWriterNamesABadField(t *testing.T) {
	_, err := deadletter.NewWriter(nil, deadletter.WriterConfig{MaxHops: -1})
	if err == nil || !strings.Contains(err.Error(), "WriterConfig.MaxHops") {
		t.Errorf("NewWriter(MaxHops -1) = %v, want an error naming WriterConfig.MaxHops", err)
	}
}
