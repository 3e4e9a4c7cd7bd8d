package dispatcher_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/deadletter"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
)

// A filter passing one record in ten delivers exactly those, in each key's
// order, and the commit still reaches the log end: rejected records are
// acked without delivery and never hold the watermark.
func TestFilterDeliversOneInTenAndCommitsToTheEnd(t *testing.T) {
	testutil.KafkaTiers(t, 4, []string{"filtered"}, func(t *testing.T, brokers []string) {
		topic := "filtered"
		if !strings.HasSuffix(t.Name(), "/kfake") {
			topic = testutil.UniqueTopic("filtered")
			testutil.CreateTopics(t, brokers, 4, topic)
		}
		rdb := testutil.StartRedis(t).Client()
		sink := testutil.StartSink(t)
		const n, keys = 3000, 30
		keyOf := func(i int) string { return fmt.Sprintf("key-%d", i%keys) }
		partOf := func(i int) int32 { return int32(i % 4) }
		ends := produce(t, brokers, topic, n, keyOf, partOf)

		sub := newSub("filtered", topic, sink.URL, subscription.OrderKey, 64)
		// Values are "record-<i>": one in ten ends in 0.
		sub.Filter = `string(value).endsWith('0') && key.startsWith('key-')`
		sub.Transform = `{"v": string(value), "k": key, "o": offset}`
		if errs := sub.Validate(); errs != nil {
			t.Fatal(errs)
		}
		startNode(t, brokers, rdb, []*subscription.Subscription{sub}, nil)
		sink.WaitAcked(t, n/10, 2*time.Minute)
		testutil.WaitCommitted(t, testutil.Admin(t, brokers), sub.GroupID(), ends, time.Minute)

		if got := sink.AckedCount(); got != n/10 {
			t.Errorf("%d records delivered, want %d (one in ten)", got, n/10)
		}
		for _, d := range sink.Deliveries() {
			if !strings.HasPrefix(string(d.Body), `{"k":"key-`) || !strings.Contains(string(d.Body), `0","o":`) {
				t.Fatalf("offset %d delivered with body %s: not one the filter passes, or not transformed", d.Offset, d.Body)
			}
			if ct := d.Header.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("transformed body sent as %q", ct)
			}
		}
		if v := sink.KeyOrderViolations(); len(v) > 0 {
			t.Fatalf("%d per-key order violations, first: %s", len(v), v[0])
		}
	})
}

// A value that is not JSON, with value_format "json", is dead-lettered
// with the reason; it never stalls its key or the commit.
func TestValueThatIsNotJSONIsDeadLettered(t *testing.T) {
	brokers := testutil.Kfake(t, 1, "notjson", "notjson.keyhook.dlq")
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	// Values are "record-<i>", not JSON.
	ends := produce(t, brokers, "notjson", 5, func(int) string { return "k" }, func(int) int32 { return 0 })
	sub := newSub("notjson", "notjson", sink.URL, subscription.OrderKey, 8)
	sub.ValueFormat = "json"
	sub.DeadLetterTopic = "" // the default topic, <topic>.keyhook.dlq
	startNode(t, brokers, rdb, []*subscription.Subscription{sub}, nil)
	testutil.WaitCommitted(t, testutil.Admin(t, brokers), sub.GroupID(), ends, time.Minute)
	if got := sink.AckedCount(); got != 0 {
		t.Errorf("%d records that are not JSON delivered, want 0", got)
	}
	consumer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("notjson.keyhook.dlq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var reasons []string
	for len(reasons) < 5 && ctx.Err() == nil {
		consumer.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			reasons = append(reasons, deadletter.Header(r, deadletter.HeaderError))
		})
	}
	if len(reasons) != 5 {
		t.Fatalf("%d dead letters, want 5", len(reasons))
	}
	for _, r := range reasons {
		if !strings.Contains(r, "value is not json") {
			t.Errorf("dead letter reason %q, want the decoding error", r)
		}
	}
}
