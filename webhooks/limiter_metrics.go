package webhooks

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// RegisterLimiterMetrics exports each endpoint origin's adaptive limit,
// in-flight and waiting requests as gauges labelled server.address (the
// origin: as many series as endpoints, never more).
func RegisterLimiterMetrics(m metric.Meter, ls *Limiters) error {
	gauge := func(name, desc string, v func(LimiterStats) int64) error {
		_, err := m.Int64ObservableGauge(name, metric.WithDescription(desc), metric.WithUnit("{request}"),
			metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
				for _, s := range ls.Stats() {
					o.Observe(v(s), metric.WithAttributes(attribute.String("server.address", s.Origin)))
				}
				return nil
			}))
		if err != nil {
			return fmt.Errorf("webhooks: limiter metric %s: %w", name, err)
		}
		return nil
	}
	if err := gauge("keyhook.endpoint.concurrency_limit", "The adaptive concurrency limit of an endpoint origin on this node; 0 while unlimited (it never throttled and no cap is set).",
		func(s LimiterStats) int64 { return int64(s.Limit) }); err != nil {
		return err
	}
	if err := gauge("keyhook.endpoint.in_flight", "Requests to an endpoint origin in flight on this node.",
		func(s LimiterStats) int64 { return int64(s.InFlight) }); err != nil {
		return err
	}
	return gauge("keyhook.endpoint.waiting", "Requests waiting for the endpoint origin's limit on this node.",
		func(s LimiterStats) int64 { return int64(s.Waiting) })
}
