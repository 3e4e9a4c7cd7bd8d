package telemetry_test

import (
	"bytes"
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/metric"

	"github.com/keyhook/keyhook/telemetry"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// The console exporter writes every span; the metrics handler serves what
// the meter provider records in Prometheus text format.
func TestSetupExportsSpansAndServesMetrics(t *testing.T) {
	var console bytes.Buffer
	p, err := telemetry.Setup(context.Background(), telemetry.Config{
		ServiceName: "keyhook", ServiceVersion: "test", NodeID: "n1",
		TracesExporter: "console", Console: &console, Getenv: env(nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	_, span := p.Tracer.Tracer("test").Start(context.Background(), "hello")
	span.End()
	c, err := p.Meter.Meter("test").Int64Counter("keyhook.test.things", metric.WithUnit("{thing}"))
	if err != nil {
		t.Fatal(err)
	}
	c.Add(context.Background(), 3)

	rec := httptest.NewRecorder()
	p.Metrics.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	if !strings.Contains(string(body), "keyhook_test_things_total") {
		t.Errorf("metrics do not show the counter:\n%s", body)
	}
	if !strings.Contains(string(body), "go_goroutines") {
		t.Errorf("metrics lack the Go runtime collector")
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(console.String(), `"Name":"hello"`) {
		t.Errorf("console exporter did not write the span: %q", console.String())
	}
}

func TestSetupChoosesExportersFromStandardVariables(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		wantErr string
	}{
		{"none by default", nil, ""},
		{"otlp over http", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, ""},
		{"otlp over grpc", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"}, ""},
		{"unknown protocol", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"}, "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{"unknown exporter", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, "traces exporter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := telemetry.Setup(context.Background(), telemetry.Config{ServiceName: "keyhook", Getenv: env(tt.env)})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			_ = p.Shutdown(context.Background())
		})
	}
}
