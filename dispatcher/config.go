package dispatcher

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/keyhook/keyhook/breaker"
	"github.com/keyhook/keyhook/recordexpr"
	"github.com/keyhook/keyhook/webhooks"
)

// The defaults of Tuning, each applied where its field is zero (nil for
// ParkAfter). The command line's flags show these same values.
const (
	DefaultFlushInterval    = 20 * time.Millisecond
	DefaultCommitInterval   = time.Second
	DefaultCommitRate       = 200
	DefaultDrainTimeout     = 10 * time.Second
	DefaultRequestTimeout   = webhooks.DefaultTimeout
	DefaultMaxWindow        = 10000
	DefaultParkAfter        = 16
	DefaultMaxBufferedBytes = 128 << 20
	DefaultSessionTimeout   = 10 * time.Second
	DefaultResyncInterval   = time.Second
	DefaultRemoveGrace      = 5 * time.Second
	DefaultRedriveInterval  = 250 * time.Millisecond
	DefaultBreakerInterval  = breaker.DefaultInterval
)

// Tuning is what an operator tunes of a node's deliveries, declared and
// documented here once: app.Config embeds it as it is, and the command
// line's flags fill it. The zero value of every field means its default.
type Tuning struct {
	// FlushInterval is how often a partition writes its acked ranges to the
	// tracker when they changed. Default 20ms: the upper bound of acks a
	// kill -9 can lose, hence of duplicates after it.
	FlushInterval time.Duration
	// CommitInterval is how often the watermark is committed to Kafka.
	// Default 1s.
	CommitInterval time.Duration
	// CommitRate bounds the Kafka commits a second of the node, over
	// every subscription: a node running more subscriptions than
	// CommitRate × CommitInterval commits each of them every
	// subscriptions ÷ CommitRate seconds instead (a thousand at the
	// default: every 5 s). Each subscription's group commits on its own,
	// so without a bound the commits, and what each costs the node and
	// its group coordinator, grow with the subscriptions and not with the
	// records. What a later commit holds back is the lag Kafka shows; a
	// new owner starts from the commit and skips what the tracking state
	// says was acked, so nothing is delivered twice for it. Default 200.
	CommitRate int
	// DrainTimeout bounds how long a revoked partition waits for its
	// in-flight deliveries before it lets go. Default 10s. Attempts in
	// flight then still run to their own timeout (see RequestTimeout).
	DrainTimeout time.Duration
	// RequestTimeout is the attempt timeout of subscriptions that set no
	// endpoint timeout: the sender's, told to the node so that a drain
	// cuts attempts still running that long past its deadline (an attempt
	// ends by its timeout, but one waiting for its endpoint's limiter has
	// not started it). Default 30s, the webhooks default.
	RequestTimeout time.Duration
	// MaxWindow bounds, per partition, the records held in memory until
	// they are acked (with ParkAfter 0, or under ordering partition: the
	// records between the watermark and the fetch position); above it
	// fetching the partition pauses, and it resumes below half of it.
	// Default 10000.
	MaxWindow int64
	// ParkAfter bounds the records of one key held in memory under
	// ordering key when the window is full and nothing is ready to send
	// (and a tenth of the window bounds them always): a key's later
	// records are parked by offset, their values dropped, and read again
	// from Kafka when the key has room. A key stuck on a failing record,
	// or slower than its arrivals, then costs a few bytes per record
	// waiting behind it instead of filling the window and stopping every
	// other key of its partition. 0 never parks, as for
	// partition.Config.ParkAfter, which takes it as it is. Nil is the
	// default, 16.
	ParkAfter *int
	// MaxParkedBytes bounds what parked records cost over the node, about
	// 64 bytes each; at the bound keys park nothing more and fetching
	// pauses where records wait. Default a quarter of MaxBufferedBytes.
	MaxParkedBytes int64
	// MaxBufferedBytes bounds, over every partition and subscription of
	// the node, the bytes of fetched records held until they are acked
	// (key, value and headers); at the bound, fetching pauses where records
	// wait. Default 128 MiB, sized for a 512 MiB container.
	MaxBufferedBytes int64
	// SessionTimeout is the consumer group session timeout. Default 10s.
	// It also sets the ownership lease (see lease).
	SessionTimeout time.Duration
	// ResyncInterval is how often the subscription set's version is read
	// even without a change notification; the set is listed again when it
	// moved, and every 30 intervals whatever it says. Default 1s.
	ResyncInterval time.Duration
	// RemoveGrace is how long a subscription must be missing from the
	// set before its consumer stops. A store that lost its data (Redis
	// restarted empty, a failover) is rebuilt from the config log within
	// seconds; stopping every consumer meanwhile would rebalance every
	// group for nothing. A deleted subscription stops that much later.
	// Default 5s; negative stops at once.
	RemoveGrace time.Duration
	// RedriveInterval is how often the node polls the redrive queues: a
	// read of the count of pushes, and a listing of the queues that may
	// have changed (all of them every 40 polls). Default 250ms.
	RedriveInterval time.Duration
	// Retry is the retry policy of every delivery under the
	// subscription's own (webhooks defaults).
	Retry webhooks.RetryPolicy
	// SharedRead reads each set of topics once on the node for every
	// subscription reading it: one consumer group per topic set (a
	// reader) decides which node reads which partition, and each
	// subscription is a cursor over that read, with its own partition
	// machines, tracking state and commits under its own group id
	// (reader.go). False: each subscription is a consumer group of its
	// own. The field's zero value is false so that a Node built in code
	// keeps the model it was written for; keyhook serve and dev turn it
	// on unless --shared-read=false. A cluster moves to it node by node:
	// a cursor starts only once no node reads its subscription with a
	// group of its own (cursor.go). Moving back takes a stop of every
	// node.
	SharedRead bool
	// BreakerFailures is how many consecutive failed attempts (5xx, 408,
	// 425, timeouts, connection errors; not 429) to one endpoint origin
	// open its circuit breaker on this node: no request goes there until
	// a probe succeeds, one per BreakerInterval, and its deliveries wait
	// without spending attempts. 0, the default, turns breakers off (see
	// docs/operations.md for why and when to turn them on).
	BreakerFailures int
	// BreakerInterval is how long an open breaker waits before its probe.
	// Default 10s (breaker.DefaultInterval).
	BreakerInterval time.Duration
}

// Config tunes a Node: what it is wired to, and its Tuning. The zero
// value of every field means its default.
type Config struct {
	// NodeID names this node in the tracking state and in status. Required.
	NodeID string
	// Brokers are the Kafka seed brokers. Required.
	Brokers []string
	// KafkaOptions are extra client options (TLS, SASL) added to every
	// client the node builds.
	KafkaOptions []kgo.Opt
	Tuning
	// Redrives, when not nil, is where the node takes the redriven dead
	// letters of the partitions it owns and sends them through their
	// key's lane (deadletter.Queue). Default nil: redrives are left
	// queued for other nodes.
	Redrives RedriveQueue
	// Members, when not nil, remembers the member id the node joined each
	// reader group as (nodes.Members). A reader removes the member it
	// remembers before it joins: the node restarted after a crash gets
	// its partitions back at once, not after the dead member's session
	// timeout. Nil: a crashed node's partitions wait for that timeout.
	Members MemberMemory
	// RateTokens, when not nil, takes the tokens of rate-limited
	// subscriptions from a limit shared by every node
	// (ratelimit.Tokens). Nil gives each node a subscription's whole rate
	// for itself: right for a single node only.
	RateTokens RateTokens
	// OnBreakerTransition, when not nil, is told of every circuit breaker
	// transition of the node (opened, half-open, closed, with the origin
	// and the reason), after it is logged and counted. It is called under
	// the breaker's lock: it must not block (an events emitter queues).
	OnBreakerTransition func(breaker.Transition)
	// Schemas, when not nil, decodes the Schema Registry formats
	// (schemas.Registry). Without it, records of a subscription whose
	// value_format or key_format is avro, protobuf or json_schema wait,
	// unacked, for a node that has one.
	Schemas recordexpr.SchemaDecoders
	// CursorDetached, when not nil, is told when a subscription's cursor
	// falls behind the shared read of a partition (SharedRead) because
	// its window is full, at most once per partition every
	// detachNoticeEvery; a cursor starting behind the reader is not
	// told of. It runs on the partition's worker and must not block
	// (events.Emitter.Emit).
	CursorDetached func(subscription, topic string, partition int32, behind int64, reason string)
	// Health, when not nil, is told each attempt's outcome of the
	// subscriptions that set disable_after, and each dead letter
	// (monitor.Monitor: automatic pause, the dead-letter threshold).
	Health Health
	// AttemptLog, when not nil, keeps each attempt of a record's delivery
	// (deliverylog.Writer); batch requests and redrives are not kept.
	AttemptLog AttemptLog
	// ForgetSubscription, when not nil, is called once the group of a
	// deleted subscription stopped on this node, so that the node's
	// metrics drop its series (telemetry.Providers.ForgetSubscription).
	ForgetSubscription func(subscriptionID string)
	// Logger receives structured logs. Default slog.Default().
	Logger *slog.Logger
	// MeterProvider receives the node's metrics. Default: no-op.
	MeterProvider metric.MeterProvider
	// TracerProvider receives a span per delivery. Default: no-op, which
	// costs next to nothing per record.
	TracerProvider trace.TracerProvider
	// Propagator reads trace context from record headers and writes it
	// into requests. Default: W3C trace context and baggage.
	Propagator propagation.TextMapPropagator
}

func (c Config) withDefaults() Config {
	c.Tuning = c.Tuning.WithDefaults()
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MeterProvider == nil {
		c.MeterProvider = metricnoop.NewMeterProvider()
	}
	if c.TracerProvider == nil {
		c.TracerProvider = tracenoop.NewTracerProvider()
	}
	if c.Propagator == nil {
		c.Propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	}
	return c
}

// WithDefaults returns t with every zero field set to its default.
func (t Tuning) WithDefaults() Tuning {
	if t.FlushInterval == 0 {
		t.FlushInterval = DefaultFlushInterval
	}
	if t.CommitInterval == 0 {
		t.CommitInterval = DefaultCommitInterval
	}
	if t.CommitRate == 0 {
		t.CommitRate = DefaultCommitRate
	}
	if t.DrainTimeout == 0 {
		t.DrainTimeout = DefaultDrainTimeout
	}
	if t.RequestTimeout == 0 {
		t.RequestTimeout = DefaultRequestTimeout
	}
	if t.MaxWindow == 0 {
		t.MaxWindow = DefaultMaxWindow
	}
	if t.ParkAfter == nil {
		t.ParkAfter = new(DefaultParkAfter)
	}
	if t.MaxBufferedBytes == 0 {
		t.MaxBufferedBytes = DefaultMaxBufferedBytes
	}
	if t.MaxParkedBytes == 0 {
		t.MaxParkedBytes = max(t.MaxBufferedBytes/4, 1)
	}
	if t.SessionTimeout == 0 {
		t.SessionTimeout = DefaultSessionTimeout
	}
	if t.ResyncInterval == 0 {
		t.ResyncInterval = DefaultResyncInterval
	}
	if t.RemoveGrace == 0 {
		t.RemoveGrace = DefaultRemoveGrace
	}
	if t.RedriveInterval == 0 {
		t.RedriveInterval = DefaultRedriveInterval
	}
	if t.BreakerInterval == 0 {
		t.BreakerInterval = DefaultBreakerInterval
	}
	t.Retry = t.Retry.WithDefaults()
	return t
}

// heartbeatInterval is the group's heartbeat interval: a fifth of the
// session timeout.
func (c Config) heartbeatInterval() time.Duration { return c.SessionTimeout / 5 }

// lease is how long an accepted tracking write lets a partition go on
// starting deliveries: the session timeout less one heartbeat interval.
// The group gives a partition to another node only once this node missed
// its heartbeats for a session timeout, and a node that wrote its state
// was heartbeating up to one interval before, so while its heartbeats
// reach the coordinator no other node can hold the partition within the
// lease of a write. A node that was frozen longer finds its lease over
// when it resumes, and asks the tracker before it delivers anything.
func (c Config) lease() time.Duration { return c.SessionTimeout - c.heartbeatInterval() }

// Validate reports the first field that is wrong, by name.
func (c Config) Validate() error {
	switch {
	case c.NodeID == "":
		return errors.New("dispatcher: NodeID is required")
	case len(c.Brokers) == 0:
		return errors.New("dispatcher: Brokers is required")
	}
	if err := c.Tuning.Validate(); err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}
	return nil
}

// Validate reports the first field of t that is wrong, as a *FieldError.
// Zero fields are valid: they mean the default.
func (t Tuning) Validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"FlushInterval", t.FlushInterval}, {"CommitInterval", t.CommitInterval},
		{"DrainTimeout", t.DrainTimeout}, {"RequestTimeout", t.RequestTimeout},
		{"SessionTimeout", t.SessionTimeout}, {"ResyncInterval", t.ResyncInterval},
		{"RedriveInterval", t.RedriveInterval}, {"BreakerInterval", t.BreakerInterval},
	} {
		if d.v < 0 {
			return &FieldError{Field: d.name, Err: fmt.Errorf("%v must not be negative", d.v)}
		}
	}
	switch {
	case t.CommitRate < 0:
		return &FieldError{Field: "CommitRate", Err: fmt.Errorf("%d must not be negative", t.CommitRate)}
	case t.MaxWindow < 0:
		return &FieldError{Field: "MaxWindow", Err: fmt.Errorf("%d must not be negative", t.MaxWindow)}
	case t.ParkAfter != nil && *t.ParkAfter < 0:
		return &FieldError{Field: "ParkAfter", Err: fmt.Errorf("%d must be 0 (never park) or more", *t.ParkAfter)}
	case t.MaxBufferedBytes < 0:
		return &FieldError{Field: "MaxBufferedBytes", Err: fmt.Errorf("%d must not be negative", t.MaxBufferedBytes)}
	case t.BreakerFailures < 0:
		return &FieldError{Field: "BreakerFailures", Err: fmt.Errorf("%d must be 0 (off) or more", t.BreakerFailures)}
	case t.MaxParkedBytes < 0:
		return &FieldError{Field: "MaxParkedBytes", Err: fmt.Errorf("%d must not be negative", t.MaxParkedBytes)}
	}
	if err := t.Retry.Validate(); err != nil {
		return &FieldError{Field: "Retry", Err: err}
	}
	return nil
}

// FieldError is a Tuning field with a value the node cannot run with;
// Field is its name, so that callers can name their own setting.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Field + " " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }
