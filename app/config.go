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
	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/schemas"
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

// DefaultHTTPAddr is Config.HTTPAddr when empty.
const DefaultHTTPAddr = "127.0.0.1:8080"

// DefaultEndpointConcurrency is keyhook serve's --endpoint-concurrency:
// every concurrent request to an origin holds a connection, so without a
// cap a thousand subscriptions pointing at one gateway hold as many
// connections as the sum of their max_in_flight, and the node (or the
// gateway) runs out of file descriptors. 1,024 keeps four subscriptions
// of the default max_in_flight at full concurrency.
const DefaultEndpointConcurrency = 1024

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
	// [App.APIAddr]). Default DefaultHTTPAddr. Only with RoleAPI.
	HTTPAddr string
	// BootstrapToken, when set, is made an admin API token at Build
	// (idempotent), so a fresh deployment has a first token.
	BootstrapToken string
	// MetricsPublic serves /metrics without a token; by default it needs
	// one with the metrics (or admin) scope.
	MetricsPublic bool
	// SchemaRegistry is the node's Schema Registry (connect.SchemaRegistry
	// builds it from the flags); no URL means none, and subscriptions of
	// the avro, protobuf and json_schema formats are refused. The
	// dispatcher decodes with it and the API's test deliveries too.
	SchemaRegistry schemas.Config
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
	// EndpointConcurrency caps the concurrent requests to one endpoint
	// origin from this node, over every subscription; 0 is no cap (keyhook
	// serve's default is DefaultEndpointConcurrency). An endpoint that
	// throttles (429, 503) gets fewer either way.
	EndpointConcurrency int
	// MaxIdleConnsPerHost is how many idle connections the delivery client
	// keeps per endpoint host. Default the webhooks client's: every connection in use is kept.
	MaxIdleConnsPerHost int
	// EndpointNetHTTP sends attempts to plain http endpoints through
	// net/http too (webhooks.ClientConfig.NetHTTPOnly).
	EndpointNetHTTP bool

	// Tuning is the dispatcher's, documented there, taken as it is: its
	// RequestTimeout bounds the API's test deliveries too.
	dispatcher.Tuning

	// Events says where operational events go (see package events).
	Events EventsConfig
	// DeliveryLog keeps each delivery's attempts (see package
	// deliverylog). Only with RoleDispatcher; every API node reads it.
	DeliveryLog DeliveryLogConfig
	// AutoPauseClock is the clock a failing streak is judged by against a
	// subscription's disable_after. Default time.Now; tests move it
	// forward instead of waiting.
	AutoPauseClock func() time.Time

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

// EventsConfig says where a node sends its operational events: to URL,
// signed with Secret, and/or to Topic. Both empty: none are sent.
type EventsConfig struct {
	// URL receives each event as a signed POST (Standard Webhooks).
	URL string
	// Secret signs them ("whsec_" and base64); required with URL.
	Secret string
	// Topic receives each event as a record.
	Topic string
	// DeadLetterThreshold, when positive, sends
	// deadletters.threshold_exceeded once a subscription's dead letters,
	// over every node, reach it within DeadLetterWindow. Default 0: off.
	DeadLetterThreshold int64
	// DeadLetterWindow is the length of those windows. Default 5m.
	DeadLetterWindow time.Duration
}

// DeliveryLogConfig turns the delivery log on and bounds it.
type DeliveryLogConfig struct {
	// Enabled writes each attempt of a record's delivery to the log.
	// Default off.
	Enabled bool
	// TTL is how long a delivery is kept after its latest attempt.
	// Default 24h.
	TTL time.Duration
	// MaxDeliveries caps the deliveries kept per subscription. Default
	// 10000.
	MaxDeliveries int
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
		{"TelemetryFlushTimeout", c.TelemetryFlushTimeout},
		{"ConfigRestoreInterval", c.ConfigRestoreInterval},
	} {
		if d.v < 0 {
			return fieldError(d.name, "is %v, must not be negative", d.v)
		}
	}
	if err := c.Tuning.Validate(); err != nil {
		var fe *dispatcher.FieldError
		if errors.As(err, &fe) {
			return &FieldError{Field: fe.Field, Err: fe.Err}
		}
		return err
	}
	if c.EndpointConcurrency < 0 {
		return fieldError("EndpointConcurrency", "is %d, must be 0 (no cap) or more", c.EndpointConcurrency)
	}
	if c.MaxIdleConnsPerHost < 0 {
		return fieldError("MaxIdleConnsPerHost", "is %d, must not be negative", c.MaxIdleConnsPerHost)
	}
	switch {
	case c.Events.URL != "" && c.Events.Secret == "":
		return fieldError("Events.Secret", "is required with Events.URL: events are signed")
	case c.Events.DeadLetterThreshold < 0:
		return fieldError("Events.DeadLetterThreshold", "is %d, must be 0 (off) or more", c.Events.DeadLetterThreshold)
	case c.Events.DeadLetterWindow < 0:
		return fieldError("Events.DeadLetterWindow", "is %v, must not be negative", c.Events.DeadLetterWindow)
	case c.DeliveryLog.TTL < 0 || c.DeliveryLog.TTL > 0 && c.DeliveryLog.TTL < time.Second:
		return fieldError("DeliveryLog.TTL", "is %v, must be 0 (the default) or at least 1s", c.DeliveryLog.TTL)
	case c.DeliveryLog.MaxDeliveries < 0:
		return fieldError("DeliveryLog.MaxDeliveries", "is %d, must be 0 (the default) or more", c.DeliveryLog.MaxDeliveries)
	}
	if err := (configlog.Config{Topic: c.ConfigTopic}).Validate(); err != nil {
		return &FieldError{Field: "ConfigTopic", Err: err}
	}
	switch strings.ToLower(strings.TrimSpace(c.TracesExporter)) {
	case "", "none", "otlp", "console", "stdout":
	default:
		return fieldError("TracesExporter", "is %q, want none, otlp or console", c.TracesExporter)
	}
	return nil
}

// withDefaults fills the fields whose default app decides, and the
// Tuning's from its own defaults; the ones the other wired packages
// default themselves stay zero and are passed on as such.
func (c Config) withDefaults() Config {
	c.Tuning = c.Tuning.WithDefaults()
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
		c.HTTPAddr = DefaultHTTPAddr
	}
	if c.APIIdleTimeout == 0 {
		c.APIIdleTimeout = 2 * time.Minute
	}
	if c.APIShutdownTimeout == 0 {
		c.APIShutdownTimeout = 5 * time.Second
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
