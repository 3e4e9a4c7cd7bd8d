package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/keyhook/keyhook/app"
	"github.com/keyhook/keyhook/configlog"
	"github.com/keyhook/keyhook/connect"
)

// config is the one configuration of a keyhook node; every field is a flag
// with a KEYHOOK_* environment twin.
type config struct {
	KafkaBrokers          []string
	RedisURL              string
	HTTPAddr              string
	NodeID                string
	AllowPrivateEndpoints bool
	Roles                 string
	LogLevel              string
	LogFormat             string
	DrainTimeout          time.Duration
	FlushInterval         time.Duration
	CommitInterval        time.Duration
	SessionTimeout        time.Duration
	MaxWindow             int64
	MaxBufferedBytes      int64
	ParkAfter             int
	MaxParkedBytes        int64
	RequestTimeout        time.Duration
	// BootstrapToken, when set, is made an admin API token at start
	// (idempotent), so a fresh deployment has a first token.
	BootstrapToken string
	// MetricsPublic serves /metrics without a token.
	MetricsPublic bool
	// MetricsToken, when set, is made an API token with the metrics scope
	// at start (idempotent): the token a Prometheus scraper is given.
	MetricsToken string
	// EndpointConcurrency caps the concurrent requests to one endpoint
	// origin from this node, over every subscription; 0 is no cap. An
	// endpoint that throttles (429, 503) gets fewer either way.
	EndpointConcurrency int
	// EndpointNetHTTP sends every attempt through net/http, plain http
	// endpoints included.
	EndpointNetHTTP bool
	// TracesExporter is none, otlp or console; empty defers to
	// OTEL_TRACES_EXPORTER.
	TracesExporter string
	// Kafka is how every Kafka client reaches the brokers (TLS, SASL).
	Kafka connect.KafkaConfig
	// Redis is the Redis topology and TLS; its URL is RedisURL.
	Redis connect.RedisConfig
	// ConfigTopic is the compacted topic recording every subscription and
	// token change.
	ConfigTopic string

	// getenv reads the environment (OTEL_* for the exporters).
	getenv func(string) string
	// console receives spans with --traces-exporter console.
	console io.Writer
}

// app maps the flags onto the node's configuration.
func (c config) app(log *slog.Logger) app.Config {
	var roles app.Role
	api, dispatcher, _ := c.roles()
	if api {
		roles |= app.RoleAPI
	}
	if dispatcher {
		roles |= app.RoleDispatcher
	}
	return app.Config{
		NodeID:                c.NodeID,
		Version:               version,
		Brokers:               c.KafkaBrokers,
		Roles:                 roles,
		HTTPAddr:              c.HTTPAddr,
		BootstrapToken:        c.BootstrapToken,
		MetricsPublic:         c.MetricsPublic,
		MetricsToken:          c.MetricsToken,
		AllowPrivateEndpoints: c.AllowPrivateEndpoints,
		RequestTimeout:        c.RequestTimeout,
		EndpointConcurrency:   c.EndpointConcurrency,
		EndpointNetHTTP:       c.EndpointNetHTTP,
		FlushInterval:         c.FlushInterval,
		CommitInterval:        c.CommitInterval,
		DrainTimeout:          c.DrainTimeout,
		SessionTimeout:        c.SessionTimeout,
		MaxWindow:             c.MaxWindow,
		MaxBufferedBytes:      c.MaxBufferedBytes,
		ParkAfter:             parkAfter(c.ParkAfter),
		MaxParkedBytes:        c.MaxParkedBytes,
		ConfigTopic:           c.ConfigTopic,
		TracesExporter:        c.TracesExporter,
		Console:               c.console,
		Getenv:                c.getenv,
		Logger:                log,
	}
}

// parkAfter is --park-after as the app takes it: 0 there is the default,
// and never parking is negative.
func parkAfter(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// kafkaFlags and redisFlags name the flag of each connect field, so that a
// connection error names what the operator typed.
var (
	kafkaFlags = map[string]string{
		"TLS":                   "kafka-tls",
		"TLSCAFile":             "kafka-tls-ca-file",
		"TLSCertFile":           "kafka-tls-cert-file",
		"TLSKeyFile":            "kafka-tls-key-file",
		"TLSServerName":         "kafka-tls-server-name",
		"TLSInsecureSkipVerify": "kafka-tls-insecure-skip-verify",
		"SASLMechanism":         "kafka-sasl-mechanism",
		"SASLUsername":          "kafka-sasl-username",
		"SASLPassword":          "kafka-sasl-password",
		"SASLPasswordFile":      "kafka-sasl-password-file",
	}
	redisFlags = map[string]string{
		"URL":            "redis-url",
		"TLSCAFile":      "redis-tls-ca-file",
		"TLSCertFile":    "redis-tls-cert-file",
		"TLSKeyFile":     "redis-tls-key-file",
		"SentinelMaster": "redis-sentinel-master",
		"Cluster":        "redis-cluster",
		"Addrs":          "redis-addrs",
	}
)

// addRedisFlags declares the Redis connection flags, named by redisFlags,
// on fs for every command that talks to Redis (serve, dev, token). rc gets
// their values as fs parses them, except Addrs, which the returned
// function fills once parsing (and the environment) is done.
func addRedisFlags(fs *flag.FlagSet, rc *connect.RedisConfig) (parsed func()) {
	fs.StringVar(&rc.URL, redisFlags["URL"], "", "Redis URL, redis://[user:password@]host:port/db (rediss:// for TLS)")
	fs.StringVar(&rc.TLSCAFile, redisFlags["TLSCAFile"], "", "PEM file of the CAs that sign Redis's certificate (needs a rediss:// URL)")
	fs.StringVar(&rc.TLSCertFile, redisFlags["TLSCertFile"], "", "PEM client certificate for Redis, with --redis-tls-key-file")
	fs.StringVar(&rc.TLSKeyFile, redisFlags["TLSKeyFile"], "", "PEM key of --redis-tls-cert-file")
	fs.StringVar(&rc.SentinelMaster, redisFlags["SentinelMaster"], "", "name of the primary the Redis Sentinels watch; --redis-addrs (or the URL's host) are the Sentinels")
	fs.BoolVar(&rc.Cluster, redisFlags["Cluster"], false, "Redis is a Redis Cluster; --redis-addrs (or the URL's host) are seed nodes")
	addrs := fs.String(redisFlags["Addrs"], "", "comma-separated host:port of the Sentinels or cluster seed nodes; replaces the URL's host")
	return func() { rc.Addrs = splitList(*addrs) }
}

// addKafkaFlags declares the Kafka connection flags, named by kafkaFlags,
// and --config-topic on fs, for every command that talks to Kafka (serve,
// dev, token).
func addKafkaFlags(fs *flag.FlagSet, kc *connect.KafkaConfig, configTopic *string) {
	fs.BoolVar(&kc.TLS, "kafka-tls", false, "connect to the Kafka brokers over TLS (system roots unless --kafka-tls-ca-file)")
	fs.StringVar(&kc.TLSCAFile, "kafka-tls-ca-file", "", "PEM file of the CAs that sign the brokers' certificates (needs --kafka-tls)")
	fs.StringVar(&kc.TLSCertFile, "kafka-tls-cert-file", "", "PEM client certificate for mutual TLS, with --kafka-tls-key-file")
	fs.StringVar(&kc.TLSKeyFile, "kafka-tls-key-file", "", "PEM key of --kafka-tls-cert-file")
	fs.StringVar(&kc.TLSServerName, "kafka-tls-server-name", "", "name to verify in the brokers' certificates (default the host dialed)")
	fs.BoolVar(&kc.TLSInsecureSkipVerify, "kafka-tls-insecure-skip-verify", false, "accept any broker certificate (test clusters only)")
	fs.StringVar(&kc.SASLMechanism, "kafka-sasl-mechanism", "", "SASL mechanism: plain, scram-sha-256 or scram-sha-512; empty for none")
	fs.StringVar(&kc.SASLUsername, "kafka-sasl-username", "", "SASL user")
	fs.StringVar(&kc.SASLPassword, "kafka-sasl-password", "", "SASL password; prefer KEYHOOK_KAFKA_SASL_PASSWORD or --kafka-sasl-password-file, which stay out of the process list")
	fs.StringVar(&kc.SASLPasswordFile, "kafka-sasl-password-file", "", "file holding the SASL password, re-read at every connection (a mounted Secret)")
	fs.StringVar(configTopic, "config-topic", configlog.DefaultTopic, "compacted Kafka topic recording every subscription and token change, from which Redis is rebuilt (created when missing)")
}

func envName(flagName string) string {
	return "KEYHOOK_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseConfig reads flags, then fills every flag not given on the command
// line from its KEYHOOK_* variable. Errors name the flag and its variable.
func parseConfig(cmd string, args []string, getenv func(string) string, stderr io.Writer, requireBackends bool) (config, error) {
	var c config
	fs := flag.NewFlagSet("keyhook "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	brokers := fs.String("kafka-brokers", "", "comma-separated Kafka seed brokers (host:port)")
	redisParsed := addRedisFlags(fs, &c.Redis)
	fs.StringVar(&c.HTTPAddr, "http-addr", "127.0.0.1:8080", "address the REST API listens on")
	fs.StringVar(&c.NodeID, "node-id", "", "this node's name in tracking state and status (default hostname-pid)")
	fs.BoolVar(&c.AllowPrivateEndpoints, "allow-private-endpoints", false, "allow endpoints on loopback, private and link-local addresses")
	fs.StringVar(&c.Roles, "roles", "api,dispatcher", "roles this process runs: api, dispatcher or both")
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.LogFormat, "log-format", "text", "log format: text or json")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", 10*time.Second, "how long a released partition waits for in-flight deliveries")
	fs.DurationVar(&c.FlushInterval, "flush-interval", 20*time.Millisecond, "how often acked offsets are written to Redis")
	fs.DurationVar(&c.CommitInterval, "commit-interval", time.Second, "how often the watermark is committed to Kafka")
	fs.DurationVar(&c.SessionTimeout, "session-timeout", 10*time.Second, "Kafka consumer group session timeout; a partition's ownership lease is four fifths of it")
	fs.Int64Var(&c.MaxWindow, "max-window", 10000, "records per partition held in memory until acked before fetching pauses (with --park-after 0, or ordering partition: records between watermark and fetch position)")
	fs.IntVar(&c.ParkAfter, "park-after", 16, "records of one key held in memory under ordering key; its later records are parked by offset and read again from Kafka when the key frees up, so a stuck key never stops its partition; 0 never parks")
	fs.Int64Var(&c.MaxParkedBytes, "max-parked-bytes", 0, "what parked records may cost over the node, about 64 bytes each; fetching pauses at the bound; 0 is a quarter of --max-buffered-bytes")
	fs.Int64Var(&c.MaxBufferedBytes, "max-buffered-bytes", 128<<20, "bytes of fetched records the node holds until acked, over every partition; fetching pauses at the bound (size it at about a quarter of the memory limit)")
	fs.DurationVar(&c.RequestTimeout, "request-timeout", 30*time.Second, "timeout of one delivery attempt")
	fs.StringVar(&c.BootstrapToken, "bootstrap-token", "", "an API token to make exist, with the admin scope, at start (prefer KEYHOOK_BOOTSTRAP_TOKEN, which stays out of the process list)")
	fs.BoolVar(&c.EndpointNetHTTP, "endpoint-net-http", false, "send to plain http endpoints with Go's net/http client too, as to https ones, instead of keyhook's HTTP/1.1 client (about twice the CPU per request)")
	fs.IntVar(&c.EndpointConcurrency, "endpoint-concurrency", 0, "most concurrent requests to one endpoint (scheme://host:port) from this node, over all subscriptions; 0 is no cap (a throttling endpoint gets fewer either way)")
	fs.StringVar(&c.TracesExporter, "traces-exporter", "", "where spans go: none, otlp (configured by the OTEL_EXPORTER_OTLP_* variables) or console; empty uses OTEL_TRACES_EXPORTER, else none")
	fs.StringVar(&c.MetricsToken, "metrics-token", "", "an API token to make exist, with only the metrics scope, at start: the scraper's (prefer KEYHOOK_METRICS_TOKEN)")
	fs.BoolVar(&c.MetricsPublic, "metrics-public", false, "serve /metrics without a token (off: it needs a token with the metrics scope, as it names endpoint origins)")

	addKafkaFlags(fs, &c.Kafka, &c.ConfigTopic)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("keyhook %s: unexpected argument %q", cmd, fs.Arg(0))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || envErr != nil {
			return
		}
		if v := getenv(envName(f.Name)); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("keyhook %s: %s=%q: invalid value for --%s: %v", cmd, envName(f.Name), v, f.Name, err)
			}
		}
	})
	if envErr != nil {
		return c, envErr
	}
	c.KafkaBrokers = splitList(*brokers)
	redisParsed()
	c.RedisURL = c.Redis.URL
	c.getenv, c.console = getenv, stderr
	if c.NodeID == "" {
		host, _ := os.Hostname()
		c.NodeID = host + "-" + strconv.Itoa(os.Getpid())
	}
	return c, c.validate(cmd, requireBackends)
}

// splitList splits a comma-separated flag value, dropping blanks.
func splitList(s string) []string {
	var out []string
	for v := range strings.SplitSeq(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// flagError is the error of one flag: "keyhook <cmd>: --<flag> (<ENV>) <msg>".
func flagError(cmd, flagName, msg string) error {
	return fmt.Errorf("keyhook %s: --%s (%s) %s", cmd, flagName, envName(flagName), msg)
}

// connectError turns a connect.FieldError into the error of the flag the
// field came from, using flags to map field to flag name; any other error
// is only prefixed with the command.
func connectError(cmd string, err error, flags map[string]string) error {
	var fe *connect.FieldError
	if errors.As(err, &fe) {
		if name, ok := flags[fe.Field]; ok {
			return flagError(cmd, name, fe.Err.Error())
		}
	}
	return fmt.Errorf("keyhook %s: %w", cmd, err)
}

func (c config) validate(cmd string, requireBackends bool) error {
	bad := func(flagName, msg string) error { return flagError(cmd, flagName, msg) }
	if requireBackends {
		if len(c.KafkaBrokers) == 0 {
			return bad("kafka-brokers", "is required")
		}
		for _, b := range c.KafkaBrokers {
			if _, port, err := net.SplitHostPort(b); err != nil || port == "" {
				return bad("kafka-brokers", fmt.Sprintf("has %q, want host:port", b))
			}
		}
		if c.RedisURL == "" {
			return bad("redis-url", "is required")
		}
		if err := c.Redis.Validate(); err != nil {
			return connectError(cmd, err, redisFlags)
		}
	}
	if err := c.Kafka.Validate(); err != nil {
		return connectError(cmd, err, kafkaFlags)
	}
	if err := (configlog.Config{Topic: c.ConfigTopic}).Validate(); err != nil {
		return bad("config-topic", strings.TrimPrefix(err.Error(), "configlog: config: "))
	}
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		return bad("http-addr", fmt.Sprintf("has %q, want host:port", c.HTTPAddr))
	}
	if _, _, err := c.roles(); err != nil {
		return bad("roles", err.Error())
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return bad("log-level", err.Error())
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return bad("log-format", fmt.Sprintf("is %q, want text or json", c.LogFormat))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"drain-timeout", c.DrainTimeout}, {"flush-interval", c.FlushInterval},
		{"commit-interval", c.CommitInterval}, {"session-timeout", c.SessionTimeout},
		{"request-timeout", c.RequestTimeout},
	} {
		if d.v <= 0 {
			return bad(d.name, fmt.Sprintf("is %v, must be positive", d.v))
		}
	}
	if c.MaxWindow <= 0 {
		return bad("max-window", fmt.Sprintf("is %d, must be positive", c.MaxWindow))
	}
	if c.MaxBufferedBytes <= 0 {
		return bad("max-buffered-bytes", fmt.Sprintf("is %d, must be positive", c.MaxBufferedBytes))
	}
	if c.ParkAfter < 0 {
		return bad("park-after", fmt.Sprintf("is %d, must be 0 (never park) or more", c.ParkAfter))
	}
	if c.MaxParkedBytes < 0 {
		return bad("max-parked-bytes", fmt.Sprintf("is %d, must be 0 (a quarter of --max-buffered-bytes) or more", c.MaxParkedBytes))
	}
	if c.EndpointConcurrency < 0 {
		return bad("endpoint-concurrency", fmt.Sprintf("is %d, must be 0 (no cap) or more", c.EndpointConcurrency))
	}
	switch strings.ToLower(c.TracesExporter) {
	case "", "none", "otlp", "console":
	default:
		return bad("traces-exporter", fmt.Sprintf("is %q, want none, otlp or console", c.TracesExporter))
	}
	return nil
}

// roles reports which of api and dispatcher this process runs.
func (c config) roles() (api, dispatcher bool, err error) {
	for _, r := range strings.Split(c.Roles, ",") {
		switch strings.TrimSpace(r) {
		case "api":
			api = true
		case "dispatcher":
			dispatcher = true
		case "":
		default:
			return false, false, fmt.Errorf("has unknown role %q, want api and/or dispatcher", r)
		}
	}
	if !api && !dispatcher {
		return false, false, errors.New("names no role, want api and/or dispatcher")
	}
	return api, dispatcher, nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	err := l.UnmarshalText([]byte(s))
	return l, err
}

func (c config) logger(w io.Writer) *slog.Logger {
	level, _ := parseLevel(c.LogLevel)
	opts := &slog.HandlerOptions{Level: level}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
