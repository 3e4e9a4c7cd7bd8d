package app

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/keyhook/keyhook/configlog"
	"github.com/keyhook/keyhook/webhooks"
)

// Role is a part of a node that a process runs.
type Role uint8

const (
	// RoleAPI serves the REST API.
	RoleAPI Role = 1 << iota
	// RoleDispatcher consumes the subscriptions' topics and delivers.
	RoleDispatcher
)

// Has reports whether r includes role.
func (r Role) Has(role Role) bool { return r&role != 0 }

// names returns the roles as the node registry lists them.
func (r Role) names() []string {
	var out []string
	if r.Has(RoleAPI) {
		out = append(out, "api")
	}
	if r.Has(RoleDispatcher) {
		out = append(out, "dispatcher")
	}
	return out
}

// Config tunes one node. The zero value of every field means its default,
// so Config{Brokers: ...} is a complete node.
type Config struct {
	// NodeID names the node in the tracking state, the node registry and
	// status. Default "<hostname>-<pid>".
	NodeID string
	// Version is what the node registry and telemetry say the node runs.
	// Default "dev".
	Version string
	// Brokers are the Kafka seed brokers. Required.
	Brokers []string
	// Roles are what the node runs. Default RoleAPI|RoleDispatcher.
	Roles Role

	// HTTPAddr is where the API listens (host:port; port 0 picks one, see
	// [App.APIAddr]). Default "127.0.0.1:8080". Only with RoleAPI.
	HTTPAddr string
	// BootstrapToken, when set, is made an admin API token at Build
	// (idempotent), so a fresh deployment has a first token.
	BootstrapToken string
	// MetricsPublic serves /metrics without a token; by default it needs
	// one with the metrics (or admin) scope.
	MetricsPublic bool
	// MetricsToken, when set, is made an API token with the metrics scope
	// at Build (idempotent), for the scraper.
	MetricsToken string
	// APIShutdownTimeout bounds how long the API finishes the requests in
	// flight once the node stops. Default 5s.
	APIShutdownTimeout time.Duration
	// APIIdleTimeout closes a keep-alive connection that sent no request
	// for this long, so idle clients cannot hold connections forever.
	// Default 2m.
	APIIdleTimeout time.Duration
	// AdminStopTimeout bounds how long a seek waits for every node to leave
	// the subscription's group. Default the dispatcher's (60s).
	AdminStopTimeout time.Duration

	// AllowPrivateEndpoints lets endpoints be on loopback, private and
	// link-local addresses. Default off: they are refused at registration
	// and at dial time.
	AllowPrivateEndpoints bool
	// RequestTimeout bounds one delivery attempt. Default 30s.
	RequestTimeout time.Duration
	// EndpointConcurrency caps the concurrent requests to one endpoint
	// origin from this node, over every subscription; 0 is no cap. An
	// endpoint that throttles (429, 503) gets fewer either way.
	EndpointConcurrency int
	// MaxIdleConnsPerHost is how many idle connections the delivery client
	// keeps per endpoint host. Default the webhooks client's: every connection in use is kept.
	MaxIdleConnsPerHost int
	// EndpointNetHTTP sends attempts to plain http endpoints through
	// net/http too (webhooks.ClientConfig.NetHTTPOnly).
	EndpointNetHTTP bool

	// FlushInterval is how often a partition writes its acks to Redis.
	// Default 20ms (the dispatcher's).
	FlushInterval time.Duration
	// CommitInterval is how often the watermark is committed to Kafka.
	// Default 1s.
	CommitInterval time.Duration
	// DrainTimeout bounds how long a released partition waits for its
	// in-flight deliveries. Default 10s.
	DrainTimeout time.Duration
	// SessionTimeout is the consumer group session timeout. Default 10s.
	SessionTimeout time.Duration
	// MaxWindow bounds the records per partition between the watermark and
	// the fetch position before fetching pauses. Default 10000.
	MaxWindow int64
	// MaxBufferedBytes bounds the bytes of fetched records the node holds
	// until they are acked, over every partition and subscription.
	// Default 128 MiB (dispatcher.DefaultMaxBufferedBytes).
	MaxBufferedBytes int64
	// ParkAfter bounds the records of one key held in memory under
	// ordering key; later ones are parked by offset and read again from
	// Kafka when the key frees up. Default 16 (dispatcher.DefaultParkAfter);
	// negative never parks.
	ParkAfter int
	// MaxParkedBytes bounds what parked records cost over the node.
	// Default a quarter of MaxBufferedBytes.
	MaxParkedBytes int64
	// ResyncInterval is how often the dispatcher re-reads the subscription
	// set without a change notification. Default 1s.
	ResyncInterval time.Duration
	// Retry is every delivery's retry policy under the subscription's own.
	// Default the webhooks defaults.
	Retry webhooks.RetryPolicy

	// ConfigTopic is the compacted Kafka topic that records every
	// subscription and token change, from which Redis is rebuilt; Build
	// creates it when missing. Default "_keyhook_config".
	ConfigTopic string
	// ConfigRestoreInterval is how often the node compares Redis with the
	// config topic and writes back what Redis lost. Default 1s.
	ConfigRestoreInterval time.Duration

	// TracesExporter is none, otlp or console; empty defers to
	// OTEL_TRACES_EXPORTER, then none.
	TracesExporter string
	// Console receives spans with TracesExporter console. Default discard.
	Console io.Writer
	// Getenv reads the environment (the OTEL_* variables). Default: an
	// empty environment, so a test never picks up the machine's.
	Getenv func(string) string
	// TelemetryFlushTimeout bounds the flush of pending spans after
	// everything else stopped. Default 5s.
	TelemetryFlushTimeout time.Duration
	// Logger receives the node's logs. Default slog.Default().
	Logger *slog.Logger
}

// FieldError is a Config field with a value the node cannot run with.
// Field is the field's name, so that callers can name their own flag.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return "app: Config." + e.Field + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

func fieldError(field, format string, args ...any) error {
	return &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
}

// Validate reports the first field that is wrong, as a *FieldError.
func (c Config) Validate() error {
	if len(c.Brokers) == 0 {
		return fieldError("Brokers", "is required")
	}
	for _, b := range c.Brokers {
		if _, port, err := net.SplitHostPort(b); err != nil || port == "" {
			return fieldError("Brokers", "has %q, want host:port", b)
		}
	}
	if c.Roles&^(RoleAPI|RoleDispatcher) != 0 {
		return fieldError("Roles", "has unknown roles %#x", uint8(c.Roles))
	}
	if c.HTTPAddr != "" {
		if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
			return fieldError("HTTPAddr", "has %q, want host:port", c.HTTPAddr)
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"APIShutdownTimeout", c.APIShutdownTimeout}, {"AdminStopTimeout", c.AdminStopTimeout},
		{"APIIdleTimeout", c.APIIdleTimeout},
		{"RequestTimeout", c.RequestTimeout}, {"FlushInterval", c.FlushInterval},
		{"CommitInterval", c.CommitInterval}, {"DrainTimeout", c.DrainTimeout},
		{"SessionTimeout", c.SessionTimeout}, {"ResyncInterval", c.ResyncInterval},
		{"TelemetryFlushTimeout", c.TelemetryFlushTimeout},
		{"ConfigRestoreInterval", c.ConfigRestoreInterval},
	} {
		if d.v < 0 {
			return fieldError(d.name, "is %v, must not be negative", d.v)
		}
	}
	if c.MaxWindow < 0 {
		return fieldError("MaxWindow", "is %d, must not be negative", c.MaxWindow)
	}
	if c.MaxParkedBytes < 0 {
		return fieldError("MaxParkedBytes", "is %d, must not be negative", c.MaxParkedBytes)
	}
	if c.MaxBufferedBytes < 0 {
		return fieldError("MaxBufferedBytes", "is %d, must not be negative", c.MaxBufferedBytes)
	}
	if c.EndpointConcurrency < 0 {
		return fieldError("EndpointConcurrency", "is %d, must be 0 (no cap) or more", c.EndpointConcurrency)
	}
	if c.MaxIdleConnsPerHost < 0 {
		return fieldError("MaxIdleConnsPerHost", "is %d, must not be negative", c.MaxIdleConnsPerHost)
	}
	if err := (configlog.Config{Topic: c.ConfigTopic}).Validate(); err != nil {
		return &FieldError{Field: "ConfigTopic", Err: err}
	}
	if err := c.Retry.Validate(); err != nil {
		return &FieldError{Field: "Retry", Err: err}
	}
	switch strings.ToLower(strings.TrimSpace(c.TracesExporter)) {
	case "", "none", "otlp", "console", "stdout":
	default:
		return fieldError("TracesExporter", "is %q, want none, otlp or console", c.TracesExporter)
	}
	return nil
}

// withDefaults fills the fields whose default app decides; the ones the
// wired packages default themselves stay zero and are passed on as such.
func (c Config) withDefaults() Config {
	if c.NodeID == "" {
		c.NodeID = defaultNodeID()
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.Roles == 0 {
		c.Roles = RoleAPI | RoleDispatcher
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = "127.0.0.1:8080"
	}
	if c.APIIdleTimeout == 0 {
		c.APIIdleTimeout = 2 * time.Minute
	}
	if c.APIShutdownTimeout == 0 {
		c.APIShutdownTimeout = 5 * time.Second
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 30 * time.Second
	}
	if c.TelemetryFlushTimeout == 0 {
		c.TelemetryFlushTimeout = 5 * time.Second
	}
	if c.Getenv == nil {
		c.Getenv = func(string) string { return "" }
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

var errNoRedis = errors.New("app: Deps.Redis is required")

// defaultNodeID is "<hostname>-<pid>": unique among the processes of one
// host, readable in status.
func defaultNodeID() string {
	host, _ := os.Hostname()
	return host + "-" + strconv.Itoa(os.Getpid())
}
