// Package telemetry sets up a keyhook process's OpenTelemetry providers:
// traces exported over OTLP (HTTP or gRPC) or to stdout, configured by the
// standard OTEL_* environment variables, and metrics served in Prometheus
// format. It owns process-wide setup only; the components that measure
// take the providers as dependencies.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Config chooses the exporters. The zero value exports no traces and
// serves metrics.
type Config struct {
	// ServiceName and ServiceVersion describe the process in every span and
	// metric (OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES still apply).
	ServiceName, ServiceVersion, NodeID string
	// TracesExporter is "none" (default), "otlp" or "console"; empty means
	// the standard OTEL_TRACES_EXPORTER variable, then "none". OTLP's
	// protocol comes from OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or
	// OTEL_EXPORTER_OTLP_PROTOCOL ("http/protobuf", default, or "grpc"),
	// its endpoint and headers from the other OTEL_EXPORTER_OTLP_*
	// variables, and sampling from OTEL_TRACES_SAMPLER(_ARG).
	TracesExporter string
	// Console receives spans when TracesExporter is "console".
	Console io.Writer
	// Getenv reads the environment; os.Getenv in production.
	Getenv func(string) string
}

// Providers are what a process hands to its components.
type Providers struct {
	Tracer     trace.TracerProvider
	Meter      metric.MeterProvider
	Propagator propagation.TextMapPropagator
	// Metrics serves the Prometheus exposition of every metric.
	Metrics http.Handler
	// ForgetSubscription drops every series labelled with a deleted
	// subscription from Metrics, for good. The SDK keeps cumulative
	// series as long as the process lives, so they are filtered out of
	// each scrape; what they hold in memory (a few KiB per subscription)
	// goes at the next restart.
	ForgetSubscription func(subscriptionID string)
	// Shutdown flushes pending spans and stops the exporters.
	Shutdown func(context.Context) error
}

// newMeterProvider builds the node's meter provider over readers. It
// keeps no exemplars: /metrics serves Prometheus's text format, which
// carries none, yet the SDK's default (trace_based) gives every series a
// reservoir (one per bucket of a histogram) and reads each measurement's
// context for a span. At 1,000 subscriptions the reservoirs were a fifth
// of a node's live heap.
//
// Each instrument keeps at most limit series (0 or less: no cap), the
// rest merged into one series labelled otel_metric_overflow.
func newMeterProvider(res *resource.Resource, limit int, readers ...sdkmetric.Reader) *sdkmetric.MeterProvider {
	opts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter),
		sdkmetric.WithCardinalityLimit(limit)}
	for _, r := range readers {
		opts = append(opts, sdkmetric.WithReader(r))
	}
	return sdkmetric.NewMeterProvider(opts...)
}

// cardinalityLimitEnv is the SDK's own setting of its series cap per
// instrument (OTEL_GO_X_CARDINALITY_LIMIT).
const cardinalityLimitEnv = "OTEL_GO_X_CARDINALITY_LIMIT"

// cardinalityLimit is the series cap of each instrument: none, unless the
// operator set OTEL_GO_X_CARDINALITY_LIMIT. The SDK's default of 2,000
// merged, past about 170 subscriptions on a 12-partition topic, every
// further subscription's partition gauges (its lag among them) into one
// series without labels, and past 500 its delivery counts. keyhook's
// labels are bounded by what is configured (subscriptions, their
// partitions and endpoint origins, and fixed sets of outcomes, classes
// and reasons; never a key or an offset), so the series are as many as
// the subscriptions make them.
func cardinalityLimit(getenv func(string) string) (int, error) {
	v := strings.TrimSpace(getenv(cardinalityLimitEnv))
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, &EnvError{Name: cardinalityLimitEnv, Err: fmt.Errorf("%q: want a whole number of series an instrument keeps (0 or less: no limit)", v)}
	}
	return n, nil
}

// EnvError is an environment variable Setup cannot use: the error names
// it, not a flag.
type EnvError struct {
	Name string
	Err  error
}

func (e *EnvError) Error() string { return e.Name + " " + e.Err.Error() }
func (e *EnvError) Unwrap() error { return e.Err }

// Setup builds the providers.
func Setup(ctx context.Context, cfg Config) (*Providers, error) {
	if cfg.Getenv == nil {
		return nil, errors.New("telemetry: Getenv is required")
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		semconv.ServiceName(cfg.ServiceName),
		semconv.ServiceVersion(cfg.ServiceVersion),
		semconv.ServiceInstanceID(cfg.NodeID),
	))
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	p := &Providers{
		Propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	promExp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}
	limit, err := cardinalityLimit(cfg.Getenv)
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	mp := newMeterProvider(res, limit, promExp)
	p.Meter = mp
	gone := &forgetting{g: reg, gone: map[string]bool{}}
	p.Metrics = promhttp.HandlerFor(gone, promhttp.HandlerOpts{})
	p.ForgetSubscription = gone.forget

	exporter := cfg.TracesExporter
	if exporter == "" {
		exporter = cfg.Getenv("OTEL_TRACES_EXPORTER")
	}
	var spanExp sdktrace.SpanExporter
	switch strings.ToLower(strings.TrimSpace(exporter)) {
	case "", "none":
	case "otlp":
		proto := cfg.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
		if proto == "" {
			proto = cfg.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
		}
		switch proto {
		case "", "http/protobuf":
			spanExp, err = otlptracehttp.New(ctx)
		case "grpc":
			spanExp, err = otlptracegrpc.New(ctx)
		default:
			err = fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: want http/protobuf or grpc", proto)
		}
	case "console", "stdout":
		w := cfg.Console
		if w == nil {
			w = io.Discard
		}
		spanExp, err = stdouttrace.New(stdouttrace.WithWriter(w))
	default:
		err = fmt.Errorf("traces exporter %q: want none, otlp or console", exporter)
	}
	if err != nil {
		_ = mp.Shutdown(ctx)
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	if spanExp == nil {
		p.Tracer = tracenoop.NewTracerProvider()
		p.Shutdown = mp.Shutdown
		return p, nil
	}
	// The SDK reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG itself.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(spanExp), sdktrace.WithResource(res))
	p.Tracer = tp
	p.Shutdown = func(ctx context.Context) error {
		return errors.Join(tp.Shutdown(ctx), mp.Shutdown(ctx))
	}
	return p, nil
}
