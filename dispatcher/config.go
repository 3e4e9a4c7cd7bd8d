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

	"github.com/keyhook/keyhook/webhooks"
)

// DefaultMaxBufferedBytes is Config.MaxBufferedBytes when zero.
const DefaultMaxBufferedBytes = 128 << 20

// DefaultParkAfter is Config.ParkAfter when zero.
const DefaultParkAfter = 16

// Config tunes a Node. The zero value of every field means its default.
type Config struct {
	// NodeID names this node in the tracking state and in status. Required.
	NodeID string
	// Brokers are the Kafka seed brokers. Required.
	Brokers []string
	// KafkaOptions are extra client options (TLS, SASL) added to every
	// client the node builds.
	KafkaOptions []kgo.Opt
	// FlushInterval is how often a partition writes its acked ranges to the
	// tracker when they changed. Default 20ms: the upper bound of acks a
	// kill -9 can lose, hence of duplicates after it.
	FlushInterval time.Duration
	// CommitInterval is how often the watermark is committed to Kafka.
	// Default 1s.
	CommitInterval time.Duration
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
	// they are acked (with ParkAfter negative, or under ordering partition:
	// the records between the watermark and the fetch position); above it
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
	// other key of its partition. Default 16; negative never parks.
	ParkAfter int
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
	// ResyncInterval is how often the subscription set is re-read even
	// without a change notification. Default 1s.
	ResyncInterval time.Duration
	// RemoveGrace is how long a subscription must be missing from the
	// set before its consumer stops. A store that lost its data (Redis
	// restarted empty, a failover) is rebuilt from the config log within
	// seconds; stopping every consumer meanwhile would rebalance every
	// group for nothing. A deleted subscription stops that much later.
	// Default 5s; negative stops at once.
	RemoveGrace time.Duration
	// Retry is the retry policy of every delivery (webhooks defaults).
	Retry webhooks.RetryPolicy
	// Redrives, when not nil, is where the node takes the redriven dead
	// letters of the partitions it owns and sends them through their
	// key's lane (deadletter.Queue). Default nil: redrives are left
	// queued for other nodes.
	Redrives RedriveQueue
	// ForgetSubscription, when not nil, is called once the group of a
	// deleted subscription stopped on this node, so that the node's
	// metrics drop its series (telemetry.Providers.ForgetSubscription).
	ForgetSubscription func(subscriptionID string)
	// RedriveInterval is how often each owned partition's redrive queue
	// is read. Default 250ms.
	RedriveInterval time.Duration
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
	if c.FlushInterval == 0 {
		c.FlushInterval = 20 * time.Millisecond
	}
	if c.CommitInterval == 0 {
		c.CommitInterval = time.Second
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 10 * time.Second
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = webhooks.DefaultTimeout
	}
	if c.MaxWindow == 0 {
		c.MaxWindow = 10000
	}
	if c.MaxBufferedBytes == 0 {
		c.MaxBufferedBytes = DefaultMaxBufferedBytes
	}
	if c.ParkAfter == 0 {
		c.ParkAfter = DefaultParkAfter
	}
	if c.MaxParkedBytes == 0 {
		c.MaxParkedBytes = max(c.MaxBufferedBytes/4, 1)
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = 10 * time.Second
	}
	if c.ResyncInterval == 0 {
		c.ResyncInterval = time.Second
	}
	if c.RemoveGrace == 0 {
		c.RemoveGrace = 5 * time.Second
	}
	if c.RedriveInterval == 0 {
		c.RedriveInterval = 250 * time.Millisecond
	}
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
	c.Retry = c.Retry.WithDefaults()
	return c
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
	case c.FlushInterval < 0:
		return fmt.Errorf("dispatcher: FlushInterval %v must not be negative", c.FlushInterval)
	case c.CommitInterval < 0:
		return fmt.Errorf("dispatcher: CommitInterval %v must not be negative", c.CommitInterval)
	case c.DrainTimeout < 0:
		return fmt.Errorf("dispatcher: DrainTimeout %v must not be negative", c.DrainTimeout)
	case c.RequestTimeout < 0:
		return fmt.Errorf("dispatcher: RequestTimeout %v must not be negative", c.RequestTimeout)
	case c.MaxWindow < 0:
		return fmt.Errorf("dispatcher: MaxWindow %d must not be negative", c.MaxWindow)
	case c.MaxBufferedBytes < 0:
		return fmt.Errorf("dispatcher: MaxBufferedBytes %d must not be negative", c.MaxBufferedBytes)
	case c.MaxParkedBytes < 0:
		return fmt.Errorf("dispatcher: MaxParkedBytes %d must not be negative", c.MaxParkedBytes)
	case c.SessionTimeout < 0:
		return fmt.Errorf("dispatcher: SessionTimeout %v must not be negative", c.SessionTimeout)
	case c.RedriveInterval < 0:
		return fmt.Errorf("dispatcher: RedriveInterval %v must not be negative", c.RedriveInterval)
	}
	if err := c.Retry.Validate(); err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}
	return nil
}
