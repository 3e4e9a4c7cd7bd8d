package dispatcher_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/keyhook/keyhook/deadletter"
	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/backoff"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/schemas"
	"github.com/keyhook/keyhook/subscription"
)

const (
	avroOrderV1 = `{"type":"record","name":"Order","namespace":"shop","fields":[
		{"name":"order_id","type":"string"},
		{"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","PAID"]}},
		{"name":"amount","type":"long"}]}`
	avroOrderV2 = `{"type":"record","name":"Order","namespace":"shop","fields":[
		{"name":"order_id","type":"string"},
		{"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","PAID"]}},
		{"name":"amount","type":"long"},
		{"name":"channel","type":"string","default":"web"}]}`
)

// avroRecord is v, in the Avro schema text, in the Confluent wire format
// under schema id.
func avroRecord(t *testing.T, topic, key string, id int, schema string, v map[string]any) *kgo.Record {
	t.Helper()
	b, err := avro.Marshal(avro.MustParse(schema), v)
	if err != nil {
		t.Fatal(err)
	}
	var h sr.ConfluentHeader
	out, _ := h.AppendEncode(nil, id, nil)
	return &kgo.Record{Topic: topic, Key: []byte(key), Value: append(out, b...)}
}

// A subscription with value_format avro and a filter on a decoded field:
// the endpoint receives the passing records as JSON; a record whose
// schema id the registry does not know is dead-lettered with the reason;
// while the registry is down, records of cached schemas keep flowing and
// those of a schema not fetched yet wait, unacked, to be decoded, filtered
// and delivered once it is back (their filter decided at delivery); and
// the commit reaches the log end.
func TestAvroRecordsAreDecodedFilteredAndWaitForTheRegistry(t *testing.T) {
	brokers := testutil.Kfake(t, 1, "orders", "orders.keyhook.dlq")
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	reg := srfake.New()
	defer reg.Close()
	id1, _, err := reg.RegisterSchema("orders-value", sr.Schema{Schema: avroOrderV1})
	if err != nil {
		t.Fatal(err)
	}
	id2, _, err := reg.RegisterSchema("orders-value", sr.Schema{Schema: avroOrderV2})
	if err != nil {
		t.Fatal(err)
	}
	var down atomic.Bool
	reg.Intercept(func(w http.ResponseWriter, _ *http.Request) bool {
		if down.Load() {
			http.Error(w, `{"error_code":50003,"message":"registry down"}`, http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	registry, err := schemas.New(schemas.Config{URL: reg.URL(), Backoff: backoff.Config{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(registry.Close)

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produce := func(recs ...*kgo.Record) {
		t.Helper()
		if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	status := func(i int) string { return []string{"PAID", "NEW"}[i%2] }
	var first []*kgo.Record
	for i := range 10 {
		first = append(first, avroRecord(t, "orders", "k"+string(rune('0'+i%3)), id1, avroOrderV1,
			map[string]any{"order_id": "a" + string(rune('0'+i)), "status": status(i), "amount": int64(100 + i)}))
	}
	unknown := avroRecord(t, "orders", "k0", 999, avroOrderV1, map[string]any{"order_id": "x", "status": "PAID", "amount": int64(1)})
	produce(append(first, unknown)...)

	sub := newSub("avro", "orders", sink.URL, subscription.OrderKey, 16)
	sub.ValueFormat = "avro"
	sub.Filter = `value.status == 'PAID' && value.amount >= 100`
	sub.DeadLetterTopic = "" // the default, orders.keyhook.dlq
	if errs := sub.Validate(); errs != nil {
		t.Fatal(errs)
	}
	startNode(t, brokers, rdb, []*subscription.Subscription{sub}, func(c *dispatcher.Config) { c.Schemas = registry })
	sink.WaitAcked(t, 5, time.Minute)
	reasons := deadLetterReasons(t, brokers, "orders.keyhook.dlq", 1)
	if !strings.Contains(reasons[0], "schema id 999 is unknown to the registry") {
		t.Errorf("dead letter reason %q, want the unknown schema id", reasons[0])
	}

	// The registry goes down: the cached schema keeps decoding, the
	// second version (never fetched) waits.
	down.Store(true)
	var second []*kgo.Record
	for i := range 4 {
		second = append(second, avroRecord(t, "orders", "v2", id2, avroOrderV2,
			map[string]any{"order_id": "b" + string(rune('0'+i)), "status": status(i), "amount": int64(200 + i), "channel": "app"}))
	}
	var third []*kgo.Record
	for i := range 4 {
		third = append(third, avroRecord(t, "orders", "k"+string(rune('0'+i%3)), id1, avroOrderV1,
			map[string]any{"order_id": "c" + string(rune('0'+i)), "status": "PAID", "amount": int64(300 + i)}))
	}
	produce(append(second, third...)...)
	sink.WaitAcked(t, 5+4, time.Minute)
	testutil.WaitFor(t, 10*time.Second, "the registry outage reported", func() bool { since, _ := registry.Outage(); return !since.IsZero() })
	for _, d := range sink.Deliveries() {
		if strings.Contains(string(d.Body), `"order_id":"b`) {
			t.Fatalf("a record of the schema not fetched was delivered during the outage: %s", d.Body)
		}
	}

	// Back: the waiting records are decoded, filtered (two of four pass)
	// and delivered; the commit reaches the log end.
	down.Store(false)
	sink.WaitAcked(t, 5+4+2, time.Minute)
	ends := map[int32]int64{0: int64(len(first) + 1 + len(second) + len(third))}
	testutil.WaitCommitted(t, testutil.Admin(t, brokers), sub.GroupID(), ends, time.Minute)

	var orders []string
	for _, d := range sink.Deliveries() {
		var v struct {
			OrderID string `json:"order_id"`
			Status  string `json:"status"`
			Amount  int64  `json:"amount"`
			Channel string `json:"channel"`
		}
		if err := json.Unmarshal(d.Body, &v); err != nil || d.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("offset %d: body %s (%s), want the decoded value as JSON: %v", d.Offset, d.Body, d.Header.Get("Content-Type"), err)
		}
		if v.Status != "PAID" {
			t.Errorf("offset %d delivered with status %s: the filter passes PAID only", d.Offset, v.Status)
		}
		if strings.HasPrefix(v.OrderID, "b") && v.Channel != "app" {
			t.Errorf("a version-2 record decoded without its channel: %s", d.Body)
		}
		orders = append(orders, v.OrderID)
	}
	if got := sink.AckedCount(); got != 11 {
		t.Errorf("%d deliveries %v, want 11 (5 + 4 + 2 of the version-2 ones)", got, orders)
	}
	if v := sink.KeyOrderViolations(); len(v) > 0 {
		t.Fatalf("per-key order violations: %v", v)
	}
}

// deadLetterReasons reads n dead letters of topic and returns their
// keyhook-last-error.
func deadLetterReasons(t *testing.T, brokers []string, topic string, n int) []string {
	t.Helper()
	consumer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var reasons []string
	for len(reasons) < n && ctx.Err() == nil {
		consumer.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			reasons = append(reasons, deadletter.Header(r, deadletter.HeaderError))
		})
	}
	if len(reasons) != n {
		t.Fatalf("%d dead letters in %s, want %d", len(reasons), topic, n)
	}
	return reasons
}
