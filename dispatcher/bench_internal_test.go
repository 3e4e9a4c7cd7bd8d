package dispatcher

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/keyhook/keyhook/delivery"
	"github.com/keyhook/keyhook/keyrange"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
	"github.com/keyhook/keyhook/webhooks"
)

// okSender answers every delivery at once, so a benchmark measures
// keyhook's own per-delivery work.
type okSender struct{}

func (okSender) Attempt(_ context.Context, _ *webhooks.Request, n int) (webhooks.Attempt, error) {
	return webhooks.Attempt{Number: n, Status: 204, Started: time.Now(), Duration: time.Millisecond}, nil
}

func (s okSender) Deliver(ctx context.Context, r *webhooks.Request, _ webhooks.RetryPolicy, onAttempt func(webhooks.Attempt)) webhooks.Result {
	a, _ := s.Attempt(ctx, r, 1)
	if onAttempt != nil {
		onAttempt(a)
	}
	return webhooks.Result{Outcome: webhooks.OutcomeSuccess, Attempts: 1, Last: a, First: a.Started, LastAt: a.Started}
}

type noTracker struct{}

func (noTracker) Load(context.Context, []tracking.PartitionKey) (map[tracking.PartitionKey]tracking.PartitionState, error) {
	return nil, nil
}
func (noTracker) ClaimMany(_ context.Context, cs []tracking.PartitionClaim) []tracking.ClaimResult {
	return make([]tracking.ClaimResult, len(cs))
}
func (noTracker) FlushRanges(_ context.Context, fs []tracking.PartitionFlush) []tracking.FlushResult {
	out := make([]tracking.FlushResult, len(fs))
	for i, f := range fs {
		out[i] = tracking.FlushResult{Watermark: f.Flush.Watermark, Committed: f.Flush.Committed}
	}
	return out
}
func (noTracker) RenewRanges(_ context.Context, rs []tracking.PartitionRenewal) []error {
	return make([]error, len(rs))
}
func (noTracker) ReleaseRanges(context.Context, tracking.PartitionKey, int64, keyrange.Set) error {
	return nil
}
func (noTracker) ReleaseMany(_ context.Context, rs []tracking.PartitionRelease) []error {
	return make([]error, len(rs))
}

type noSubs struct{}

func (noSubs) Watch(ctx context.Context, _ time.Duration, _ func([]*subscription.Subscription)) error {
	<-ctx.Done()
	return nil
}

// BenchmarkDeliveryTelemetry measures the per-delivery cost of keyhook's
// own work (request building, span, metrics) with telemetry off (no-op
// providers), with metrics on, and with metrics and every span recorded.
// Compare the ns/op and allocs/op of the three in one run.
func BenchmarkDeliveryTelemetry(b *testing.B) {
	for _, mode := range []string{"off", "metrics", "metrics+traces"} {
		b.Run(mode, func(b *testing.B) {
			cfg := Config{NodeID: "bench", Brokers: []string{"127.0.0.1:1"}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
			if mode != "off" {
				cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			}
			if mode == "metrics+traces" {
				cfg.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()))
			}
			n, err := New(cfg, noSubs{}, okSender{}, noTracker{})
			if err != nil {
				b.Fatal(err)
			}
			sub := &subscription.Subscription{ID: "sub_bench", Topics: []string{"t"}, Endpoint: subscription.Endpoint{URL: "http://example.com/"}}
			sub.Normalize()
			g := &group{n: n, sub: sub, log: n.log, ep: delivery.New(sub, n.cfg.Retry)}
			g.initTelemetry()
			w := &worker{g: g, attemptCtx: context.Background(), deliverCtx: context.Background()}
			rec := &kgo.Record{
				Topic: "t", Partition: 3, Offset: 12345, Key: []byte("customer-42"),
				Value: make([]byte, 256), Timestamp: time.Now(),
				Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")}},
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				f := g.newFlight(w, rec, nil)
				if _, done := f.step(); !done || !f.acked {
					b.Fatal("delivery not acked")
				}
				w.mail.results = w.mail.results[:0]
			}
		})
	}
}
