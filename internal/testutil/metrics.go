package testutil

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Int64Metric collects r and returns the sum of every data point of the
// int64 counter or gauge called name, over all its attributes; 0 when
// nothing was recorded under that name.
func Int64Metric(t testing.TB, r *sdkmetric.ManualReader, name string) int64 {
	t.Helper()
	return sumMetric[int64](t, r, name)
}

// Float64Metric does the same for a float64 counter or gauge.
func Float64Metric(t testing.TB, r *sdkmetric.ManualReader, name string) float64 {
	t.Helper()
	return sumMetric[float64](t, r, name)
}

func sumMetric[N int64 | float64](t testing.TB, r *sdkmetric.ManualReader, name string) N {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n N
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[N]:
				for _, dp := range d.DataPoints {
					n += dp.Value
				}
			case metricdata.Gauge[N]:
				for _, dp := range d.DataPoints {
					n += dp.Value
				}
			}
		}
	}
	return n
}
