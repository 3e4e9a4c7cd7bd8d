package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/metric"

	"github.com/keyhook/keyhook/api"
	"github.com/keyhook/keyhook/auth"
	"github.com/keyhook/keyhook/breaker"
	"github.com/keyhook/keyhook/configlog"
	"github.com/keyhook/keyhook/connect"
	"github.com/keyhook/keyhook/control"
	"github.com/keyhook/keyhook/deadletter"
	"github.com/keyhook/keyhook/deliverylog"
	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/events"
	"github.com/keyhook/keyhook/internal/keyspace"
	"github.com/keyhook/keyhook/monitor"
	"github.com/keyhook/keyhook/nodes"
	"github.com/keyhook/keyhook/ratelimit"
	"github.com/keyhook/keyhook/recordexpr"
	"github.com/keyhook/keyhook/schemas"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/telemetry"
	"github.com/keyhook/keyhook/tracking"
	"github.com/keyhook/keyhook/webhooks"
)

// Deps are what a node runs over and does not own: the caller connects
// them before Build and closes them after Run returns.
type Deps struct {
	// Redis holds the tracking state, subscriptions, tokens and the node
	// registry. Required. Build adds a hook to it that counts the
	// commands it sends (keyhook_redis_commands_total), for good: give
	// each node its own client.
	Redis redis.UniversalClient
	// KafkaOptions are added to every Kafka client the node builds (TLS,
	// SASL: see connect.KafkaOptions). Seed brokers come from
	// Config.Brokers.
	KafkaOptions []kgo.Opt
	// Subscriptions, when not nil, feeds the dispatcher instead of the
	// Redis subscription store, for a caller that fixes the subscription
	// set itself (the benchmark). The API still uses the store.
	Subscriptions dispatcher.Subscriptions
	// MeterProvider, when not nil, receives the node's metrics instead of
	// the Prometheus registry served at /metrics, for a caller that reads
	// them itself.
	MeterProvider metric.MeterProvider
}

// App is one wired node. Build makes it; Run runs it until its context
// ends; Close releases it when Run is never called.
type App struct {
	cfg Config
	rdb redis.UniversalClient

	cfgLog   *configlog.Log
	tracker  *tracking.Store
	redrives *deadletter.Queue
	subs     *subscription.Store
	tokens   *auth.Store
	registry *nodes.Registry
	tel      *telemetry.Providers

	// The dispatcher role; nil without it.
	node   *dispatcher.Node
	sender *webhooks.Client
	// monitor judges failing streaks and dead-letter windows; events
	// sends operational events (nil when none are configured); attempts
	// writes the delivery log (nil when it is off).
	monitor  *monitor.Monitor
	events   *events.Emitter
	attempts *deliverylog.Writer

	// The API role; nil without it.
	admClient   *kgo.Client
	deadLetters *deadletter.Reader
	cleaner     *control.Cleaner
	apiSender   *webhooks.Client
	srv         *http.Server
	ln          net.Listener

	// closers release, in reverse order, what Build acquired.
	closers []func()
	closed  bool
}

// Build validates cfg and wires a node over deps. It starts no goroutine
// (the API's port is already bound, so [App.APIAddr] is known): [App.Run]
// starts everything. A failing Build has released what it acquired; a
// config error is a *FieldError naming the field.
//
// Construction is one straight sequence, so that a change to one
// component's constructor is a local edit here.
func Build(ctx context.Context, cfg Config, deps Deps) (_ *App, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Redis == nil {
		return nil, errNoRedis
	}
	cfg = cfg.withDefaults()
	log := cfg.Logger
	a := &App{cfg: cfg, rdb: deps.Redis}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	kafkaOpts := append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...)}, deps.KafkaOptions...)

	// Stores, over the caller's Redis.
	a.tracker, err = tracking.New(a.rdb, tracking.Config{})
	if err != nil {
		return nil, fmt.Errorf("app: %w", err)
	}
	// Redrives queue in Redis for the owners of their source partitions.
	if a.redrives, err = deadletter.NewQueue(a.rdb, deadletter.QueueConfig{}); err != nil {
		return nil, fmt.Errorf("app: %w", err)
	}
	if err := a.buildConfigLog(ctx, kafkaOpts); err != nil {
		return nil, err
	}
	if a.subs, err = subscription.New(a.rdb, subscription.Config{Log: a.cfgLog}); err != nil {
		return nil, fmt.Errorf("app: %w", err)
	}
	if a.tokens, err = auth.New(a.rdb, auth.Config{Log: a.cfgLog}); err != nil {
		return nil, fmt.Errorf("app: %w", err)
	}
	if cfg.BootstrapToken != "" {
		created, err := a.tokens.Ensure(ctx, "bootstrap", cfg.BootstrapToken, []auth.Scope{auth.ScopeAdmin})
		if err != nil {
			return nil, &FieldError{Field: "BootstrapToken", Err: err}
		}
		log.Info("bootstrap token ensured", "name", "bootstrap", "created", created)
	}
	if cfg.MetricsToken != "" {
		created, err := a.tokens.Ensure(ctx, "metrics", cfg.MetricsToken, []auth.Scope{auth.ScopeMetrics})
		if err != nil {
			return nil, &FieldError{Field: "MetricsToken", Err: err}
		}
		log.Info("metrics token ensured", "name", "metrics", "created", created)
	}
	a.registry, err = nodes.New(a.rdb, nodes.Config{Logger: log})
	if err != nil {
		return nil, fmt.Errorf("app: %w", err)
	}

	// Telemetry: the exporters, flushed last by Run.
	a.tel, err = telemetry.Setup(ctx, telemetry.Config{
		ServiceName: "keyhook", ServiceVersion: cfg.Version, NodeID: cfg.NodeID,
		TracesExporter: cfg.TracesExporter, Console: cfg.Console, Getenv: cfg.Getenv,
	})
	var envErr *telemetry.EnvError
	switch {
	case errors.As(err, &envErr):
		return nil, fmt.Errorf("app: %w", err) // it names the variable, not a flag
	case err != nil:
		return nil, &FieldError{Field: "TracesExporter", Err: err}
	}
	a.closers = append(a.closers, a.flushTelemetry)
	meter := a.tel.Meter
	if deps.MeterProvider != nil {
		meter = deps.MeterProvider
	}
	// What the node costs Redis per record: the flush rounds, claims and
	// stores, counted as sent (a script call once).
	if err := connect.CountRedisCommands(a.rdb, meter); err != nil {
		return nil, fmt.Errorf("app: %w", err)
	}
	policy := webhooks.AddressPolicy{AllowPrivate: cfg.AllowPrivateEndpoints}
	// One registry client and schema cache for the node's dispatcher and
	// API; closed after both stopped.
	var decoders recordexpr.SchemaDecoders // nil: none
	if cfg.SchemaRegistry.URL != "" {
		rc := cfg.SchemaRegistry
		rc.Logger, rc.MeterProvider = log, meter
		reg, err := schemas.New(rc)
		if err != nil {
			return nil, &FieldError{Field: "SchemaRegistry", Err: err}
		}
		a.closers = append(a.closers, reg.Close)
		decoders = reg
		log.Info("schema registry", "url", reg.URL())
	}

	if cfg.Roles.Has(RoleDispatcher) {
		// One set of per-origin limiters for every subscription of the node.
		limiters, err := webhooks.NewLimiters(webhooks.LimiterConfig{Max: cfg.EndpointConcurrency})
		if err != nil {
			return nil, &FieldError{Field: "EndpointConcurrency", Err: err}
		}
		if err := webhooks.RegisterLimiterMetrics(meter.Meter("github.com/keyhook/keyhook/webhooks"), limiters); err != nil {
			return nil, fmt.Errorf("app: limiter metrics: %w", err)
		}
		a.sender, err = webhooks.NewClient(webhooks.ClientConfig{
			Policy: policy, Timeout: cfg.RequestTimeout, Limiters: limiters,
			MaxIdleConnsPerHost: cfg.MaxIdleConnsPerHost, NetHTTPOnly: cfg.EndpointNetHTTP,
			TracerProvider: a.tel.Tracer, Propagator: a.tel.Propagator,
		})
		if err != nil {
			return nil, fmt.Errorf("app: webhooks client: %w", err)
		}
		a.closers = append(a.closers, a.sender.CloseIdleConnections)
		var subs dispatcher.Subscriptions = a.subs
		if deps.Subscriptions != nil {
			subs = deps.Subscriptions
		}
		if err := a.buildOperations(kafkaOpts, meter); err != nil {
			return nil, err
		}
		var attemptLog dispatcher.AttemptLog
		if a.attempts != nil {
			attemptLog = a.attempts
		}
		// Rate limits are shared by every node through Redis.
		rateTokens, err := ratelimit.New(a.rdb, "")
		if err != nil {
			return nil, fmt.Errorf("app: %w", err)
		}
		// The node restarted after a crash removes the member it left in
		// its reader groups (dispatcher.MemberMemory).
		members, err := nodes.NewMembers(a.rdb, "", cfg.NodeID)
		if err != nil {
			return nil, fmt.Errorf("app: %w", err)
		}
		a.node, err = dispatcher.New(dispatcher.Config{
			AttemptLog:          attemptLog,
			NodeID:              cfg.NodeID,
			Brokers:             cfg.Brokers,
			KafkaOptions:        deps.KafkaOptions,
			Tuning:              cfg.Tuning,
			Redrives:            a.redrives,
			Health:              a.monitor,
			OnBreakerTransition: breakerEvents(a),
			CursorDetached: func(sub, topic string, partition int32, behind int64, reason string) {
				a.events.Emit(events.SubscriptionCursorDetached(sub, events.CursorDetached{Topic: topic, Partition: partition, Behind: behind, Reason: reason}))
			},
			RateTokens: rateTokens,
			Members:    members,
			// Deleted subscriptions leave /metrics with their consumers.
			ForgetSubscription: a.tel.ForgetSubscription,
			Logger:             log,
			MeterProvider:      meter,
			TracerProvider:     a.tel.Tracer,
			Propagator:         a.tel.Propagator,
			Schemas:            decoders,
		}, subs, a.sender, a.tracker)
		if err != nil {
			return nil, fmt.Errorf("app: %w", err)
		}
	}

	if cfg.Roles.Has(RoleAPI) {
		a.admClient, err = kgo.NewClient(kafkaOpts...)
		if err != nil {
			return nil, fmt.Errorf("app: kafka admin client: %w", err)
		}
		a.closers = append(a.closers, a.admClient.Close)
		adm := kadm.NewClient(a.admClient)
		status := control.NewStatusReader(adm, a.tracker)
		// The API's own client (webhook tests) has no
		// limiters: an operator's test must not queue behind deliveries.
		a.apiSender, err = webhooks.NewClient(webhooks.ClientConfig{Policy: policy, Timeout: cfg.RequestTimeout})
		if err != nil {
			return nil, fmt.Errorf("app: webhooks client: %w", err)
		}
		a.closers = append(a.closers, a.apiSender.CloseIdleConnections)
		seeker, err := control.NewSeeker(adm, a.subs, a.tracker, control.SeekConfig{StopTimeout: cfg.AdminStopTimeout, Nodes: a.registry})
		if err != nil {
			return nil, fmt.Errorf("app: %w", err)
		}
		a.deadLetters, err = deadletter.NewReader(kafkaOpts, a.redrives, deadletter.ReaderConfig{})
		if err != nil {
			return nil, fmt.Errorf("app: %w", err)
		}
		a.closers = append(a.closers, a.deadLetters.Close)
		// Every API node drains the cleanups of deleted subscriptions.
		deliveryLog := deliverylog.NewReader(a.rdb, keyspace.Keyspace{})
		streaks := monitor.Streaks{RDB: a.rdb}
		a.cleaner, err = control.NewCleaner(a.rdb, adm, a.subs, []control.StateDeleter{a.tracker, a.redrives, deliveryLog, streaks}, control.CleanupConfig{Logger: log, Nodes: a.registry})
		if err != nil {
			return nil, fmt.Errorf("app: %w", err)
		}
		starts, err := control.NewStartResolver(adm)
		if err != nil {
			return nil, fmt.Errorf("app: %w", err)
		}
		tester, err := api.NewWebhookTester(a.apiSender, recordexpr.WithSchemas(decoders))
		if err != nil {
			return nil, fmt.Errorf("app: %w", err)
		}
		handler, err := api.NewRouter(api.Dependencies{
			Store: a.subs, URLs: policy, Status: status, Seeker: seeker, Starts: starts, DeadLetters: a.deadLetters,
			Tester: tester, Nodes: a.registry, Auth: a.tokens, Cleanup: a.cleaner, Keys: control.NewKeyReader(adm, a.tracker),
			DeliveryLog: deliveryLog, Streaks: streaks,
		}, api.Config{
			Logger:         log,
			Metrics:        a.tel.Metrics,
			MetricsPublic:  cfg.MetricsPublic,
			SchemaRegistry: cfg.SchemaRegistry.URL != "",
			ReadinessChecks: map[string]api.ReadinessCheck{
				"redis": func(ctx context.Context) error { return a.rdb.Ping(ctx).Err() },
				"kafka": a.admClient.Ping,
			},
		})
		if err != nil {
			return nil, fmt.Errorf("app: %w", err)
		}
		a.ln, err = net.Listen("tcp", cfg.HTTPAddr)
		if err != nil {
			return nil, &FieldError{Field: "HTTPAddr", Err: err}
		}
		a.closers = append(a.closers, func() { _ = a.ln.Close() })
		// Idle keep-alive connections are closed after APIIdleTimeout; no
		// WriteTimeout, as a test delivery or a seek may take as long as
		// the endpoint's timeout or the drain.
		a.srv = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: cfg.APIIdleTimeout}
	}
	return a, nil
}

// buildOperations builds what a dispatcher node tells its operator:
// the events emitter (when a URL or topic is set), the monitor of
// failing streaks and dead letters, and the delivery log's writer (when
// it is on).
func (a *App) buildOperations(kafkaOpts []kgo.Opt, meter metric.MeterProvider) error {
	cfg := a.cfg
	ev := cfg.Events
	if ev.URL != "" || ev.Topic != "" {
		ecfg := events.Config{NodeID: cfg.NodeID, URL: ev.URL, Secret: ev.Secret, Topic: ev.Topic, Logger: cfg.Logger, MeterProvider: meter}
		if ev.Topic != "" {
			cl, err := kgo.NewClient(kafkaOpts...)
			if err != nil {
				return fmt.Errorf("app: events producer: %w", err)
			}
			a.closers = append(a.closers, cl.Close)
			ecfg.Producer = cl
		}
		var err error
		if a.events, err = events.NewEmitter(ecfg); err != nil {
			var fe *events.FieldError
			if errors.As(err, &fe) {
				return &FieldError{Field: "Events." + fe.Field, Err: fe.Err}
			}
			return fmt.Errorf("app: %w", err)
		}
	}
	var emit monitor.Emitter
	if a.events != nil {
		emit = a.events
	}
	var err error
	a.monitor, err = monitor.New(a.rdb, a.subs, emit, monitor.Config{
		DeadLetterThreshold: ev.DeadLetterThreshold, DeadLetterWindow: ev.DeadLetterWindow,
		Now: cfg.AutoPauseClock, Logger: cfg.Logger,
	})
	if err != nil {
		return fmt.Errorf("app: %w", err)
	}
	if cfg.DeliveryLog.Enabled {
		a.attempts, err = deliverylog.NewWriter(a.rdb, deliverylog.WriterConfig{
			TTL: cfg.DeliveryLog.TTL, MaxDeliveries: cfg.DeliveryLog.MaxDeliveries, Logger: cfg.Logger, MeterProvider: meter,
		})
		if err != nil {
			var fe *deliverylog.FieldError
			if errors.As(err, &fe) {
				return &FieldError{Field: "DeliveryLog." + fe.Field, Err: fe.Err}
			}
			return fmt.Errorf("app: %w", err)
		}
	}
	return nil
}

// configTopicTimeout bounds the creation of the config topic at Build.
const configTopicTimeout = 30 * time.Second

// buildConfigLog connects the config log, whose topic holds every
// subscription and token change, and makes sure the topic exists: the
// stores record every change there before Redis, and Run rebuilds Redis
// from it.
func (a *App) buildConfigLog(ctx context.Context, kafkaOpts []kgo.Opt) error {
	var err error
	a.cfgLog, err = configlog.New(kafkaOpts, configlog.Config{
		Topic: a.cfg.ConfigTopic, Interval: a.cfg.ConfigRestoreInterval, Logger: a.cfg.Logger,
	})
	if err != nil {
		return &FieldError{Field: "ConfigTopic", Err: err}
	}
	a.closers = append(a.closers, a.cfgLog.Close)
	ctx, cancel := context.WithTimeout(ctx, configTopicTimeout)
	defer cancel()
	if err := a.cfgLog.EnsureTopic(ctx); err != nil {
		if errors.Is(err, configlog.ErrTopicUnfit) {
			return &FieldError{Field: "ConfigTopic", Err: err}
		}
		return fmt.Errorf("app: %w", err)
	}
	return nil
}

// flushTelemetry gives pending spans a few seconds to leave.
func (a *App) flushTelemetry() {
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.TelemetryFlushTimeout)
	defer cancel()
	if err := a.tel.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		a.cfg.Logger.Warn("telemetry flush", "err", err)
	}
}

// Close releases what Build acquired, in reverse order. Run calls it when
// it returns; call it only for an App that is never run. It is idempotent.
func (a *App) Close() {
	if a.closed {
		return
	}
	a.closed = true
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
}

// NodeID is the node's name in the tracking state and the registry.
func (a *App) NodeID() string { return a.cfg.NodeID }

// APIAddr is the address the API listens on, or "" without RoleAPI.
func (a *App) APIAddr() string {
	if a.ln == nil {
		return ""
	}
	return a.ln.Addr().String()
}

// Node is the dispatcher, for its stats; nil without RoleDispatcher.
func (a *App) Node() *dispatcher.Node { return a.node }

// Subscriptions is the subscription store the node's API serves.
func (a *App) Subscriptions() *subscription.Store { return a.subs }

// breakerEvents sends an origin's breaker opening (from closed) and
// closing as operational events; a failed probe reopening it is the same
// outage and sends nothing. It runs under the breaker's lock, and Emit
// only queues.
func breakerEvents(a *App) func(breaker.Transition) {
	var mu sync.Mutex
	opened := make(map[string]time.Time) // guarded by mu
	return func(tr breaker.Transition) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case tr.To == breaker.Open && tr.From == breaker.Closed:
			opened[tr.Origin] = tr.At
			a.events.Emit(events.EndpointBreakerOpened(events.BreakerOpened{Origin: tr.Origin, Reason: tr.Reason,
				Failures: a.cfg.BreakerFailures, ProbeIntervalMS: a.cfg.Tuning.WithDefaults().BreakerInterval.Milliseconds()}))
		case tr.To == breaker.Closed:
			at, ok := opened[tr.Origin]
			delete(opened, tr.Origin)
			var openMS int64
			if ok {
				openMS = tr.At.Sub(at).Milliseconds()
			}
			a.events.Emit(events.EndpointBreakerClosed(events.BreakerClosed{Origin: tr.Origin, OpenMS: openMS}))
		}
	}
}
