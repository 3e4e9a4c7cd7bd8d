package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/twmb/franz-go/pkg/kgo"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/keyhook/keyhook/events"
	"github.com/keyhook/keyhook/internal/backoff"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/webhooks"
)

// operator is the operator's events endpoint: a real HTTP server that
// verifies every request with the Standard Webhooks library and keeps
// the events it accepted. Until failFirst requests were answered 503 it
// refuses them.
type operator struct {
	srv       *httptest.Server
	mu        sync.Mutex
	accepted  []events.Event
	requests  int
	failFirst int
	bad       []error
}

func newOperator(t *testing.T, secret string, failFirst int) *operator {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	o := &operator{failFirst: failFirst}
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		o.mu.Lock()
		defer o.mu.Unlock()
		o.requests++
		if err := wh.Verify(body, r.Header); err != nil {
			o.bad = append(o.bad, err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if o.requests <= o.failFirst {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var ev events.Event
		if err := json.Unmarshal(body, &ev); err != nil {
			o.bad = append(o.bad, err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if ev.ID != r.Header.Get("webhook-id") {
			o.bad = append(o.bad, errors.New("webhook-id "+r.Header.Get("webhook-id")+" is not the event id "+ev.ID))
		}
		o.accepted = append(o.accepted, ev)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(o.srv.Close)
	return o
}

func (o *operator) snapshot() ([]events.Event, int, []error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]events.Event(nil), o.accepted...), o.requests, append([]error(nil), o.bad...)
}

func run(t *testing.T, e *events.Emitter) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 15s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestEventsArriveSignedInOrderAfterTheEndpointRefusedThem(t *testing.T) {
	secret, err := webhooks.GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	op := newOperator(t, secret, 2)
	e, err := events.NewEmitter(events.Config{
		NodeID: "node-a", URL: op.srv.URL, Secret: secret,
		Backoff: backoff.Config{Initial: time.Millisecond, Max: 5 * time.Millisecond},
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	since := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	e.Emit(events.SubscriptionAutoPaused("sub_1", events.AutoPaused{FailingSince: since, DisableAfter: "24h", Reason: "failing"}))
	e.Emit(events.EndpointBreakerOpened(events.BreakerOpened{Origin: "https://fn.example:443", Failures: 5}))
	e.Emit(events.EndpointBreakerClosed(events.BreakerClosed{Origin: "https://fn.example:443", OpenMS: 1200}))
	run(t, e)
	waitFor(t, "three events accepted", func() bool { got, _, _ := op.snapshot(); return len(got) == 3 })
	got, requests, bad := op.snapshot()
	if len(bad) > 0 {
		t.Fatalf("the operator's endpoint refused requests: %v", bad)
	}
	if requests != 5 {
		t.Errorf("requests = %d, want 5 (two refused with 503, tried again, then three taken)", requests)
	}
	wantTypes := []string{events.TypeSubscriptionAutoPaused, events.TypeBreakerOpened, events.TypeBreakerClosed}
	for i, ev := range got {
		if ev.Type != wantTypes[i] {
			t.Errorf("event %d is %s, want %s (in the order emitted)", i, ev.Type, wantTypes[i])
		}
		if ev.SpecVersion != "1.0" || ev.Node != "node-a" || ev.Source != "keyhook://node-a" || ev.ID == "" || ev.Time.IsZero() || ev.DataContentType != "application/json" {
			t.Errorf("event %d envelope = %+v, want specversion 1.0, node and source of node-a, an id and a time", i, ev)
		}
	}
	var paused events.AutoPaused
	if err := json.Unmarshal(got[0].Data, &paused); err != nil || got[0].Subscription != "sub_1" || !paused.FailingSince.Equal(since) || paused.DisableAfter != "24h" {
		t.Errorf("auto_paused = %+v data %s (%v), want subscription sub_1, failing_since %v, disable_after 24h", got[0], got[0].Data, err, since)
	}
}

func TestAFullQueueDropsTheOldestAndCountsIt(t *testing.T) {
	secret, _ := webhooks.GenerateSecret()
	op := newOperator(t, secret, 0)
	reader := sdkmetric.NewManualReader()
	e, err := events.NewEmitter(events.Config{NodeID: "n", URL: op.srv.URL, Secret: secret, QueueSize: 2, Logger: slog.New(slog.DiscardHandler),
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		e.Emit(events.New(events.TypeCursorDetached, "sub_"+string(rune('a'+i)), events.CursorDetached{Topic: "t"}))
	}
	run(t, e)
	waitFor(t, "two events accepted", func() bool { got, _, _ := op.snapshot(); return len(got) == 2 })
	time.Sleep(50 * time.Millisecond) // nothing more may come
	got, _, _ := op.snapshot()
	if len(got) != 2 || got[0].Subscription != "sub_d" || got[1].Subscription != "sub_e" {
		t.Fatalf("accepted %+v, want only the two newest (sub_d, sub_e): the oldest are dropped", got)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	dropped := int64(-1)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "keyhook.events.dropped" {
				dropped = 0
				for _, dp := range sum.DataPoints {
					dropped += dp.Value
				}
			}
		}
	}
	if dropped != 3 {
		t.Fatalf("keyhook.events.dropped = %d, want 3", dropped)
	}
}

func TestEventsAreWrittenToTheKafkaTopic(t *testing.T) {
	readBack(t, testutil.Kfake(t, 1, "ops-events"), "ops-events")
}

// The same against the real broker of the integration tier.
func TestEventsAreWrittenToARealKafkaTopic(t *testing.T) {
	brokers := testutil.RealKafka(t)
	topic := "ops-events-" + strconv.FormatInt(time.Now().UnixNano(), 10)
	testutil.CreateTopics(t, brokers, 1, topic)
	readBack(t, brokers, topic)
}

// readBack emits an event to topic and reads it back with a consumer of
// its own.
func readBack(t *testing.T, brokers []string, topic string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	e, err := events.NewEmitter(events.Config{NodeID: "node-b", Topic: topic, Producer: cl, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	e.Emit(events.DeadLettersThresholdExceeded("sub_9", events.DeadLetters{Count: 10, Threshold: 10, WindowMS: 60000}))
	run(t, e)

	rd, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for len(recs) == 0 && ctx.Err() == nil {
		recs = append(recs, rd.PollFetches(ctx).Records()...)
	}
	if len(recs) != 1 {
		t.Fatalf("read %d records from %s, want 1", len(recs), topic)
	}
	var ev events.Event
	if err := json.Unmarshal(recs[0].Value, &ev); err != nil {
		t.Fatal(err)
	}
	var d events.DeadLetters
	_ = json.Unmarshal(ev.Data, &d)
	if ev.Type != events.TypeDeadLettersThreshold || string(recs[0].Key) != "sub_9" || ev.Node != "node-b" || d.Count != 10 {
		t.Fatalf("record key %q event %+v data %+v, want deadletters.threshold_exceeded of sub_9 keyed by it, from node-b, count 10", recs[0].Key, ev, d)
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	for _, tt := range []struct {
		cfg   events.Config
		field string
	}{
		{events.Config{NodeID: "n", URL: "http://x"}, "Secret"},
		{events.Config{NodeID: "n", URL: "http://x", Secret: "nope"}, "Secret"},
		{events.Config{NodeID: "n", URL: "ftp://x", Secret: "whsec_x"}, "URL"},
		{events.Config{NodeID: "n", Topic: "t"}, "Producer"},
	} {
		var fe *events.FieldError
		if _, err := events.NewEmitter(tt.cfg); !errors.As(err, &fe) || fe.Field != tt.field {
			t.Errorf("NewEmitter(%+v) = %v, want a FieldError naming %s", tt.cfg, err, tt.field)
		}
	}
}

func TestANilEmitterTakesEvents(t *testing.T) {
	var e *events.Emitter
	e.Emit(events.New(events.TypeCursorDetached, "s", nil)) // must not panic
}
