package dispatcher_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
)

// syncBuffer is a log destination safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A record produced inside a trace is delivered inside the same trace: the
// delivery span is a child of the producer's span, retries show as events,
// a dead letter is recorded on the span and in a log line carrying the
// trace id, the endpoint receives a traceparent of that trace, and the
// metrics count each outcome and attempt.
func TestDeliveryContinuesTheProducersTrace(t *testing.T) {
	brokers := testutil.Kfake(t, 1, "traced")
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	var mu sync.Mutex
	calls := map[int64]int{}
	sink.Status = func(d *testutil.Delivery) int {
		mu.Lock()
		defer mu.Unlock()
		calls[d.Offset]++
		switch {
		case d.Offset == 1 && calls[1] == 1:
			return http.StatusServiceUnavailable // retried once
		case d.Offset == 2:
			return http.StatusBadRequest // dead-lettered
		}
		return http.StatusOK
	}

	// The producer's trace: one span, its context in the record headers.
	producerTP := sdktrace.NewTracerProvider()
	prop := propagation.TraceContext{}
	pctx, producerSpan := producerTP.Tracer("producer").Start(context.Background(), "send traced")
	carrier := propagation.MapCarrier{}
	prop.Inject(pctx, carrier)
	producerSpan.End()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 3 {
		rec := &kgo.Record{Topic: "traced", Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")}
		for k, v := range carrier {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
		if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	var logs syncBuffer
	sub := newSub("traced", "traced", sink.URL, subscription.OrderKey, 4)
	sub.DeadLetterTopic = "" // default dead-letter topic
	startNode(t, brokers, rdb, []*subscription.Subscription{sub}, func(c *dispatcher.Config) {
		c.TracerProvider, c.MeterProvider = tp, mp
		c.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	sink.WaitAcked(t, 2, 30*time.Second)
	want := producerSpan.SpanContext().TraceID()

	// Every request carries a traceparent of the producer's trace.
	for _, d := range sink.Deliveries() {
		sc := trace.SpanContextFromContext(prop.Extract(context.Background(), propagation.HeaderCarrier(d.Header)))
		if sc.TraceID() != want {
			t.Errorf("offset %d attempt %d: traceparent trace %s, want %s", d.Offset, d.Attempt, sc.TraceID(), want)
		}
	}
	// Wait for the three delivery spans (the dead letter ends last) and
	// their four attempt spans (offset 1 is tried twice).
	deadline := time.Now().Add(20 * time.Second)
	for len(spans.GetSpans()) < 7 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	var deliveries, attempts []tracetest.SpanStub
	for _, s := range spans.GetSpans() {
		switch s.SpanKind {
		case trace.SpanKindConsumer:
			deliveries = append(deliveries, s)
		case trace.SpanKindClient:
			attempts = append(attempts, s)
		}
	}
	if len(deliveries) != 3 || len(attempts) != 4 {
		t.Fatalf("%d delivery and %d attempt spans, want 3 and 4", len(deliveries), len(attempts))
	}
	byOffset := map[int64]tracetest.SpanStub{}
	bySpanID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range deliveries {
		if s.Name != "process traced" {
			t.Errorf("delivery span %q, want \"process traced\"", s.Name)
		}
		if s.Parent.SpanID() != producerSpan.SpanContext().SpanID() || s.SpanContext.TraceID() != want {
			t.Errorf("span %q parent %s trace %s, want the producer's span %s", s.Name, s.Parent.SpanID(), s.SpanContext.TraceID(), producerSpan.SpanContext().SpanID())
		}
		attrs := spanAttrs(s)
		for _, k := range []attribute.Key{"messaging.system", "messaging.destination.name", "messaging.destination.partition.id", "messaging.kafka.offset", "messaging.consumer.group.name", "messaging.message.id", "messaging.kafka.message.key"} {
			if _, ok := attrs[k]; !ok {
				t.Errorf("delivery span lacks attribute %s", k)
			}
		}
		byOffset[attrs["messaging.kafka.offset"].AsInt64()] = s
		bySpanID[s.SpanContext.SpanID()] = s
	}
	perDelivery := map[trace.SpanID]int{}
	attemptIDs := map[trace.SpanID]bool{}
	for _, a := range attempts {
		if _, ok := bySpanID[a.Parent.SpanID()]; !ok || a.Name != "POST" {
			t.Errorf("attempt span %q is not a child of a delivery span", a.Name)
		}
		perDelivery[a.Parent.SpanID()]++
		attemptIDs[a.SpanContext.SpanID()] = true
		attrs := spanAttrs(a)
		for _, k := range []attribute.Key{"http.request.method", "http.response.status_code", "server.address", "server.port", "url.full", "messaging.system", "messaging.destination.name", "messaging.kafka.offset", "messaging.message.id"} {
			if _, ok := attrs[k]; !ok {
				t.Errorf("attempt span lacks attribute %s", k)
			}
		}
	}
	if n := perDelivery[byOffset[1].SpanContext.SpanID()]; n != 2 {
		t.Errorf("the retried delivery has %d attempt spans, want 2", n)
	}
	// The endpoint's parent is the attempt that reached it.
	for _, d := range sink.Deliveries() {
		sc := trace.SpanContextFromContext(prop.Extract(context.Background(), propagation.HeaderCarrier(d.Header)))
		if !attemptIDs[sc.SpanID()] {
			t.Errorf("offset %d attempt %d: traceparent span %s is not an attempt span", d.Offset, d.Attempt, sc.SpanID())
		}
	}
	if ev := eventNames(byOffset[1]); !strings.Contains(ev, "retry") {
		t.Errorf("retried delivery has events %q, want a retry", ev)
	}
	if ev := eventNames(byOffset[2]); !strings.Contains(ev, "dead_letter") {
		t.Errorf("dead-lettered delivery has events %q, want dead_letter", ev)
	}
	if !strings.Contains(logs.String(), `"trace_id":"`+want.String()+`"`) {
		t.Errorf("the dead-letter log line does not carry trace id %s:\n%s", want, logs.String())
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	sums := counterSums(rm)
	for name, want := range map[string]int64{
		"keyhook.deliveries{keyhook.outcome=delivered}":             2,
		"keyhook.deliveries{keyhook.outcome=dead_lettered}":         1,
		"keyhook.delivery.attempts{http.response.status_class=2xx}": 2,
		"keyhook.delivery.attempts{http.response.status_class=5xx}": 1,
		"keyhook.delivery.attempts{http.response.status_class=4xx}": 1,
		"keyhook.dead_letters{}":                                    1,
		"keyhook.records.fetched{}":                                 3,
	} {
		if sums[name] != want {
			t.Errorf("%s = %d, want %d (all: %v)", name, sums[name], want, sums)
		}
	}
}

func spanAttrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	attrs := map[attribute.Key]attribute.Value{}
	for _, a := range s.Attributes {
		attrs[a.Key] = a.Value
	}
	return attrs
}

func eventNames(s tracetest.SpanStub) string {
	var names []string
	for _, e := range s.Events {
		names = append(names, e.Name)
	}
	return strings.Join(names, ",")
}

// counterSums adds up every Int64 sum by name and its one distinguishing
// attribute (outcome or status class), ignoring subscription and partition.
func counterSums(rm metricdata.ResourceMetrics) map[string]int64 {
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				label := ""
				for _, k := range []attribute.Key{"keyhook.outcome", "http.response.status_class"} {
					if v, ok := dp.Attributes.Value(k); ok {
						label = string(k) + "=" + v.AsString()
					}
				}
				out[m.Name+"{"+label+"}"] += dp.Value
			}
		}
	}
	return out
}
