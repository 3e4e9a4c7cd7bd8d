package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"

	"github.com/keyhook/keyhook/app"
	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/webhooks"
)

// benchSubscription is the subscription every keyhook contender and
// ceiling A deliver for: the defaults a user gets (raw format, signed,
// default retry policy) with the scenario's ordering and max_in_flight,
// and a retry interval capped so a recovered endpoint is retried soon.
func benchSubscription(spec childSpec) (*subscription.Subscription, error) {
	s := &subscription.Subscription{
		ID:          spec.Group,
		Name:        spec.Group,
		Topics:      []string{spec.Topic},
		Endpoint:    subscription.Endpoint{URL: spec.SinkURL},
		Ordering:    subscription.Ordering(spec.Ordering),
		MaxInFlight: spec.MaxInFlight,
		Start:       subscription.StartEarliest,
		Retry:       subscription.RetryPolicy{MaxIntervalMS: int(spec.RetryMaxInterval.Milliseconds())},
		Version:     1,
	}
	if spec.Batch > 1 {
		s.Batch = subscription.Batch{MaxRecords: spec.Batch}
	}
	s.Normalize()
	if err := s.EnsureSigningSecret(time.Now()); err != nil {
		return nil, fmt.Errorf("bench: signing secret: %w", err)
	}
	if errs := s.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("bench: subscription: %v", errs)
	}
	return s, nil
}

// newWebhookClient builds ceiling A's client the way app.Build builds a
// node's (per-origin adaptive limiters, no cap: the --endpoint-concurrency
// default), private addresses allowed since the sink listens on loopback.
func newWebhookClient(spec childSpec) (*webhooks.Client, error) {
	limiters, err := webhooks.NewLimiters(webhooks.LimiterConfig{})
	if err != nil {
		return nil, fmt.Errorf("bench: webhooks limiters: %w", err)
	}
	c, err := webhooks.NewClient(webhooks.ClientConfig{
		Policy:              webhooks.AddressPolicy{AllowPrivate: true},
		MaxIdleConnsPerHost: spec.IdleConns,
		Limiters:            limiters,
	})
	if err != nil {
		return nil, fmt.Errorf("bench: webhooks client: %w", err)
	}
	return c, nil
}

// staticSubscriptions feeds a node one subscription that never changes.
type staticSubscriptions struct{ sub *subscription.Subscription }

func (s staticSubscriptions) Watch(ctx context.Context, _ time.Duration, fn func([]*subscription.Subscription)) error {
	fn([]*subscription.Subscription{s.sub})
	<-ctx.Done()
	return ctx.Err()
}

// runKeyhook runs a node built by app.Build, as keyhook serve builds it
// with --roles dispatcher, over the bench's Redis, until ctx ends,
// sampling its metrics. Its one subscription is fixed rather than read
// from the subscription store, so that the contenders sharing the Redis
// never see each other's.
func runKeyhook(ctx context.Context, spec childSpec, log *slog.Logger, out *childOut, rep *childReport) error {
	sub, err := benchSubscription(spec)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: spec.RedisAddr})
	defer rdb.Close()
	// Metrics on, as a node serving /metrics runs; the manual reader is
	// also how the bench reads the window and backpressure gauges.
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	nodeID := spec.NodeID
	if nodeID == "" {
		nodeID = "bench-" + spec.Group
	}
	kh, err := app.Build(ctx, app.Config{
		NodeID:                nodeID,
		Brokers:               spec.Brokers,
		Roles:                 app.RoleDispatcher,
		AllowPrivateEndpoints: true,
		MaxIdleConnsPerHost:   spec.IdleConns,
		Tuning: dispatcher.Tuning{
			MaxWindow:     spec.MaxWindow,
			FlushInterval: spec.FlushInterval,
			DrainTimeout:  2 * time.Second,
			SharedRead:    spec.Shared,
		},
		Logger: log,
	}, app.Deps{Redis: rdb, Subscriptions: staticSubscriptions{sub}, MeterProvider: mp})
	if err != nil {
		return fmt.Errorf("bench: node: %w", err)
	}
	node := kh.Node()

	windows := make(map[string]int64)
	g := func(s *sample) { readNodeGauges(ctx, reader, s, windows) }
	nctx, cancel := context.WithCancel(ctx)
	defer cancel()
	smp := startSampler(nctx, spec.SampleEvery, g)
	runErr := make(chan error, 1)
	go func() { runErr <- kh.Run(nctx) }()
	go announceReady(nctx, node, spec.Partitions, out)

	err = <-runErr
	cancel()
	rep.Samples = smp.wait(nil)
	rep.PartitionWindow = windows
	// Read once the node stopped: its final flush and releases are in.
	rep.RedisSent = redisSent(reader)
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("bench: node: %w", err)
	}
	return nil
}

// announceReady prints "ready" once the node owns every partition.
func announceReady(ctx context.Context, node *dispatcher.Node, partitions int, out *childOut) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if len(node.Owned()) >= partitions {
			out.line(lineReady)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// readNodeGauges reads the node's own gauges into s and keeps, per
// partition, the largest window seen.
func readNodeGauges(ctx context.Context, r *sdkmetric.ManualReader, s *sample, windows map[string]int64) {
	var rm metricdata.ResourceMetrics
	if err := r.Collect(ctx, &rm); err != nil {
		return
	}
	var fetched, acked int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, dp := range sum.DataPoints {
					switch m.Name {
					case "keyhook.delivery.attempts":
						s.Attempts += dp.Value
						if v, ok := dp.Attributes.Value("http.response.status_class"); ok && v.AsString() == "error" {
							s.AttemptErrors += dp.Value
						}
					case "keyhook.records.fetched":
						fetched += dp.Value
					case "keyhook.records.not_owned":
						s.NotOwned += dp.Value
					case "keyhook.records.reread":
						s.Reread += dp.Value
						s.RereadSeen = true
					case "keyhook.records.parked": // published as an up-down counter
						s.Parked += dp.Value
						s.ParkedSeen = true
					case "keyhook.deliveries":
						if v, ok := dp.Attributes.Value("keyhook.outcome"); ok && v.AsString() != "aborted" {
							acked += dp.Value
						}
					}
				}
				continue
			}
			g, ok := m.Data.(metricdata.Gauge[int64])
			if !ok {
				continue
			}
			for _, dp := range g.DataPoints {
				switch m.Name {
				case "keyhook.pending":
					s.Pending += dp.Value
				case "keyhook.in_flight":
					s.InFlight += dp.Value
				case "keyhook.partition.paused":
					s.Paused += dp.Value
				case "keyhook.partition.key_hashes":
					s.KeyHashes += dp.Value
				case "keyhook.records.parked":
					s.Parked += dp.Value
					s.ParkedSeen = true
				case "keyhook.watermark.distance":
					s.MaxDistance = max(s.MaxDistance, dp.Value)
					p := partitionOf(dp.Attributes)
					windows[p] = max(windows[p], dp.Value)
				}
			}
		}
	}
	// Records another sharer delivers are fetched and never acked here.
	s.Held = max(0, fetched-acked-s.NotOwned)
}

// redisSent reads the node's count of the commands it sent to Redis.
func redisSent(r *sdkmetric.ManualReader) int64 {
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		return 0
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "keyhook.redis.commands" {
				for _, dp := range sum.DataPoints {
					n += dp.Value
				}
			}
		}
	}
	return n
}

func partitionOf(set attribute.Set) string {
	v, ok := set.Value(semconv.MessagingDestinationPartitionIDKey)
	if !ok {
		return "?"
	}
	return v.Emit()
}
