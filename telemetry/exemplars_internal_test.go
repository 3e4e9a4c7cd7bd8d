package telemetry

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/trace"
)

// A measurement made inside a sampled span leaves no exemplar in the
// node's meter provider (the scrape could not carry it, and each series
// would hold a reservoir for it), where the SDK's default keeps one.
func TestTheNodesMetricsKeepNoExemplars(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{1},
		SpanID:     trace.SpanID{2},
		TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	exemplars := func(mp *sdkmetric.MeterProvider, r *sdkmetric.ManualReader) int {
		h, err := mp.Meter("test").Float64Histogram("attempt.duration")
		if err != nil {
			t.Fatal(err)
		}
		h.Record(ctx, 0.25)
		var rm metricdata.ResourceMetrics
		if err := r.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
					n += len(dp.Exemplars)
				}
			}
		}
		return n
	}
	sdkDefault := sdkmetric.NewManualReader()
	if n := exemplars(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkDefault)), sdkDefault); n == 0 {
		t.Fatal("the SDK's default kept no exemplar of a sampled span's measurement: this test no longer tells the two apart")
	}
	node := sdkmetric.NewManualReader()
	if n := exemplars(newMeterProvider(resource.Empty(), 0, node), node); n != 0 {
		t.Errorf("the node's meter provider kept %d exemplars; want none", n)
	}
}
