package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/keyhook/keyhook/api"
	"github.com/keyhook/keyhook/auth"
	"github.com/keyhook/keyhook/connect"
	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/nodes"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/telemetry"
	"github.com/keyhook/keyhook/tracking"
	"github.com/keyhook/keyhook/webhooks"
)

// serve builds the Kafka client options and the Redis client that the
// connection flags describe, then runs a node over them. File errors (a
// missing CA, a key that does not match its certificate, an unreadable
// password file) stop the start here, naming the flag.
func serve(ctx context.Context, c config, stderr io.Writer) error {
	log := c.logger(stderr)
	kafkaOpts, err := connect.KafkaOptions(c.Kafka)
	if err != nil {
		return connectError("serve", err, kafkaFlags)
	}
	c.kafkaOpts = kafkaOpts
	rdb, err := connect.NewRedis(c.Redis)
	if err != nil {
		return connectError("serve", err, redisFlags)
	}
	defer rdb.Close()
	log.Info("connections",
		"kafka_tls", c.Kafka.TLS, "kafka_sasl", c.Kafka.SASLMechanism,
		"redis_tls", strings.HasPrefix(c.RedisURL, "rediss://"),
		"redis_cluster", c.Redis.Cluster, "redis_sentinel_master", c.Redis.SentinelMaster)
	return runNode(ctx, c, rdb, log, nil)
}

// runNode wires one node over a Redis client and runs it until ctx ends.
// Shutdown order: the API stops accepting, the dispatcher drains, flushes
// and commits, then the Kafka and Redis clients close (by the callers).
// ready, when not nil, receives the API address once it listens.
func runNode(ctx context.Context, c config, rdb redis.UniversalClient, log *slog.Logger, ready func(apiAddr string, node *dispatcher.Node)) error {
	runAPI, runDispatcher, _ := c.roles()
	// go-redis logs through a process-wide logger that prints raw lines to
	// stderr; route them through the node's structured log instead.
	redis.SetLogger(connect.RedisLogger{Logger: log})
	tracker, err := tracking.New(rdb, tracking.Config{})
	if err != nil {
		return err
	}
	subs := subscription.NewStore(rdb, "")
	policy := webhooks.AddressPolicy{AllowPrivate: c.AllowPrivateEndpoints}
	tokens := auth.NewStore(rdb, "")
	if c.BootstrapToken != "" {
		created, err := tokens.Ensure(ctx, "bootstrap", c.BootstrapToken, []auth.Scope{auth.ScopeAdmin})
		if err != nil {
			return flagError("serve", "bootstrap-token", err.Error())
		}
		log.Info("bootstrap token ensured", "name", "bootstrap", "created", created)
	}
	if c.MetricsToken != "" {
		created, err := tokens.Ensure(ctx, "metrics", c.MetricsToken, []auth.Scope{auth.ScopeMetrics})
		if err != nil {
			return flagError("serve", "metrics-token", err.Error())
		}
		log.Info("metrics token ensured", "name", "metrics", "created", created)
	}
	registry, err := nodes.NewRegistry(rdb, nodes.Config{Logger: log})
	if err != nil {
		return err
	}
	getenv := c.getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	tel, err := telemetry.Setup(ctx, telemetry.Config{
		ServiceName: "keyhook", ServiceVersion: version, NodeID: c.NodeID,
		TracesExporter: c.TracesExporter, Console: c.console, Getenv: getenv,
	})
	if err != nil {
		return flagError("serve", "traces-exporter", err.Error())
	}
	defer func() {
		// Pending spans get a few seconds to leave after everything stopped.
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tel.Shutdown(sctx)
	}()

	g, ctx := errgroup.WithContext(ctx)
	var node *dispatcher.Node
	if runDispatcher {
		limiters, err := webhooks.NewLimiters(webhooks.LimiterConfig{Max: c.EndpointConcurrency})
		if err != nil {
			return flagError("serve", "endpoint-concurrency", err.Error())
		}
		if err := webhooks.RegisterLimiterMetrics(tel.Meter.Meter("github.com/keyhook/keyhook/webhooks"), limiters); err != nil {
			return err
		}
		sender, err := webhooks.NewClient(webhooks.ClientConfig{Policy: policy, Timeout: c.RequestTimeout, Limiters: limiters,
			TracerProvider: tel.Tracer, Propagator: tel.Propagator})
		if err != nil {
			return err
		}
		node, err = dispatcher.New(dispatcher.Config{
			NodeID:         c.NodeID,
			Brokers:        c.KafkaBrokers,
			FlushInterval:  c.FlushInterval,
			CommitInterval: c.CommitInterval,
			DrainTimeout:   c.DrainTimeout,
			SessionTimeout: c.SessionTimeout,
			MaxWindow:      c.MaxWindow,
			KafkaOptions:   c.kafkaOpts,
			Logger:         log,
			MeterProvider:  tel.Meter,
			TracerProvider: tel.Tracer,
			Propagator:     tel.Propagator,
		}, subs, sender, tracker)
		if err != nil {
			return err
		}
		g.Go(func() error { return node.Run(ctx) })
	}
	apiAddr := ""
	if runAPI {
		admClient, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.KafkaBrokers...)}, c.kafkaOpts...)...)
		if err != nil {
			return fmt.Errorf("keyhook: kafka admin client: %w", err)
		}
		defer admClient.Close()
		status := dispatcher.NewStatusReader(kadm.NewClient(admClient), tracker)
		apiSender, err := webhooks.NewClient(webhooks.ClientConfig{Policy: policy, Timeout: c.RequestTimeout})
		if err != nil {
			return err
		}
		defer apiSender.CloseIdleConnections()
		admin, err := dispatcher.NewAdmin(append([]kgo.Opt{kgo.SeedBrokers(c.KafkaBrokers...)}, c.kafkaOpts...),
			subs, tracker, apiSender, dispatcher.AdminConfig{})
		if err != nil {
			return err
		}
		defer admin.Close()
		tester, err := api.NewWebhookTester(apiSender)
		if err != nil {
			return err
		}
		handler, err := api.NewRouter(api.Dependencies{
			Store: subs, URLs: policy, Status: status, Seeker: admin, DeadLetters: admin,
			Tester: tester, Nodes: registry, Auth: tokens,
		}, api.Config{
			Logger:        log,
			Metrics:       tel.Metrics,
			MetricsPublic: c.MetricsPublic,
			ReadinessChecks: map[string]api.ReadinessCheck{
				"redis": func(ctx context.Context) error { return rdb.Ping(ctx).Err() },
				"kafka": admClient.Ping,
			},
		})
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", c.HTTPAddr)
		if err != nil {
			return fmt.Errorf("keyhook: --http-addr (KEYHOOK_HTTP_ADDR) %s: %w", c.HTTPAddr, err)
		}
		apiAddr = ln.Addr().String()
		// Requests are small JSON (1 MiB at most) and idle keep-alive
		// connections are dropped; no WriteTimeout, as a test delivery
		// or a seek may take as long as the endpoint or the drain.
		srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
		g.Go(func() error {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("keyhook: api: %w", err)
			}
			return nil
		})
		g.Go(func() error {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return srv.Shutdown(sctx)
		})
		log.Info("api listening", "addr", apiAddr)
	}
	// The registry starts last, once everything it announces runs.
	var roles []string
	if runAPI {
		roles = append(roles, "api")
	}
	if runDispatcher {
		roles = append(roles, "dispatcher")
	}
	g.Go(func() error {
		return registry.Run(ctx, nodes.Info{ID: c.NodeID, Version: version, Roles: roles}, func() []nodes.Ownership {
			if node == nil {
				return nil
			}
			var out []nodes.Ownership
			for _, o := range node.Owned() {
				out = append(out, nodes.Ownership(o))
			}
			return out
		})
	})
	log.Info("keyhook node started", "node", c.NodeID, "version", version, "api", runAPI, "dispatcher", runDispatcher)
	if ready != nil {
		ready(apiAddr, node)
	}
	err = g.Wait()
	log.Info("keyhook node stopped", "node", c.NodeID)
	return err
}
