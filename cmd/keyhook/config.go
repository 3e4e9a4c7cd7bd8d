package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/keyhook/keyhook/app"
	"github.com/keyhook/keyhook/configlog"
	"github.com/keyhook/keyhook/connect"
	"github.com/keyhook/keyhook/deliverylog"
	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/monitor"
	"github.com/keyhook/keyhook/webhooks"
)

// config is the one configuration of a keyhook node; every field is set
// by flags, each with a KEYHOOK_* environment twin.
type config struct {
	// node is the node's configuration as the knobs set it, taken by
	// app.Build as it is (see app).
	node app.Config
	// Roles, LogLevel and LogFormat are what the flags say; app derives
	// the node's roles and logger from them.
	Roles     string
	LogLevel  string
	LogFormat string
	// Kafka is how every Kafka client reaches the brokers (TLS, SASL).
	Kafka connect.KafkaConfig
	// Redis is the Redis topology, URL and TLS.
	Redis connect.RedisConfig
	// Registry is the Schema Registry's URL, credentials and TLS.
	Registry connect.SchemaRegistryConfig
}

// knob is one flag of the node's configuration, declared once in knobs:
// its name (its environment twin is envName(name)), the app.Config field
// it sets, its help, and the declaration that binds it with its default.
type knob struct {
	name string
	// field is the app.Config field the flag sets, "" none: a FieldError
	// of app.Build names the flag through it.
	field string
	// doc is the default as the README's flag table states it, when not
	// the flag's own literal default.
	doc   string
	usage string
	bind  func(fs *flag.FlagSet, name, usage string)
	// check, when set, says what is wrong with the value parsed, "" when
	// nothing is.
	check func() string
}

// knobs declares the flags that set c.node and the process's own
// (--roles, --log-*). The connection flags are declared by addKafkaFlags
// and addRedisFlags, shared with the commands that connect without
// running a node. Each default is the constant the package that applies
// it owns.
func (c *config) knobs() []knob {
	n := &c.node
	return []knob{
		{name: "http-addr", field: "HTTPAddr", usage: "address the REST API listens on",
			bind: stringFlag(&n.HTTPAddr, app.DefaultHTTPAddr), check: func() string {
				if _, _, err := net.SplitHostPort(n.HTTPAddr); err != nil {
					return fmt.Sprintf("has %q, want host:port", n.HTTPAddr)
				}
				return ""
			}},
		{name: "node-id", field: "NodeID", doc: "hostname-pid", usage: "this node's name in tracking state and status (default hostname-pid)",
			bind: stringFlag(&n.NodeID, "")},
		{name: "allow-private-endpoints", usage: "allow endpoints on loopback, private and link-local addresses",
			bind: boolFlag(&n.AllowPrivateEndpoints)},
		{name: "roles", field: "Roles", usage: "roles this process runs: api, dispatcher or both",
			bind: stringFlag(&c.Roles, "api,dispatcher"), check: func() string {
				if _, _, err := c.roles(); err != nil {
					return err.Error()
				}
				return ""
			}},
		{name: "log-level", usage: "log level: debug, info, warn, error",
			bind: stringFlag(&c.LogLevel, "info"), check: func() string {
				if _, err := parseLevel(c.LogLevel); err != nil {
					return err.Error()
				}
				return ""
			}},
		{name: "log-format", usage: "log format: text or json",
			bind: stringFlag(&c.LogFormat, "text"), check: func() string {
				if c.LogFormat != "text" && c.LogFormat != "json" {
					return fmt.Sprintf("is %q, want text or json", c.LogFormat)
				}
				return ""
			}},
		{name: "drain-timeout", field: "DrainTimeout", usage: "how long a released partition waits for in-flight deliveries",
			bind: durationFlag(&n.DrainTimeout, dispatcher.DefaultDrainTimeout), check: positive(&n.DrainTimeout)},
		{name: "flush-interval", field: "FlushInterval", usage: "how often acked offsets are written to Redis",
			bind: durationFlag(&n.FlushInterval, dispatcher.DefaultFlushInterval), check: positive(&n.FlushInterval)},
		{name: "commit-interval", field: "CommitInterval", usage: "how often the watermark is committed to Kafka",
			bind: durationFlag(&n.CommitInterval, dispatcher.DefaultCommitInterval), check: positive(&n.CommitInterval)},
		{name: "commit-rate", field: "CommitRate", usage: "most Kafka commits a second from this node, over every subscription: with more subscriptions than commit-rate × commit-interval, each commits every subscriptions ÷ commit-rate seconds instead",
			bind: intFlag(&n.CommitRate, dispatcher.DefaultCommitRate), check: func() string {
				if n.CommitRate <= 0 {
					return fmt.Sprintf("is %d, must be positive", n.CommitRate)
				}
				return ""
			}},
		{name: "session-timeout", field: "SessionTimeout", usage: "Kafka consumer group session timeout; a partition's ownership lease is four fifths of it",
			bind: durationFlag(&n.SessionTimeout, dispatcher.DefaultSessionTimeout), check: positive(&n.SessionTimeout)},
		{name: "max-window", field: "MaxWindow", usage: "records per partition held in memory until acked before fetching pauses (with --park-after 0, or ordering partition: records between watermark and fetch position)",
			bind: int64Flag(&n.MaxWindow, dispatcher.DefaultMaxWindow), check: func() string {
				if n.MaxWindow <= 0 {
					return fmt.Sprintf("is %d, must be positive", n.MaxWindow)
				}
				return ""
			}},
		{name: "park-after", field: "ParkAfter", usage: "records of one key held in memory under ordering key; its later records are parked by offset and read again from Kafka when the key frees up, so a stuck key never stops its partition; 0 never parks",
			bind: intFlag(n.ParkAfter, dispatcher.DefaultParkAfter), check: func() string {
				if *n.ParkAfter < 0 {
					return fmt.Sprintf("is %d, must be 0 (never park) or more", *n.ParkAfter)
				}
				return ""
			}},
		{name: "max-parked-bytes", field: "MaxParkedBytes", doc: "a quarter of `--max-buffered-bytes`", usage: "what parked records may cost over the node, about 64 bytes each; fetching pauses at the bound; 0 is a quarter of --max-buffered-bytes",
			bind: int64Flag(&n.MaxParkedBytes, 0), check: func() string {
				if n.MaxParkedBytes < 0 {
					return fmt.Sprintf("is %d, must be 0 (a quarter of --max-buffered-bytes) or more", n.MaxParkedBytes)
				}
				return ""
			}},
		{name: "max-buffered-bytes", field: "MaxBufferedBytes", usage: "bytes of fetched records the node holds until acked, over every partition; fetching pauses at the bound (size it at about a quarter of the memory limit)",
			bind: int64Flag(&n.MaxBufferedBytes, dispatcher.DefaultMaxBufferedBytes), check: func() string {
				if n.MaxBufferedBytes <= 0 {
					return fmt.Sprintf("is %d, must be positive", n.MaxBufferedBytes)
				}
				return ""
			}},
		{name: "request-timeout", field: "RequestTimeout", usage: "timeout of one delivery attempt",
			bind: durationFlag(&n.RequestTimeout, dispatcher.DefaultRequestTimeout), check: positive(&n.RequestTimeout)},
		{name: "bootstrap-token", field: "BootstrapToken", usage: "an API token to make exist, with the admin scope, at start (prefer KEYHOOK_BOOTSTRAP_TOKEN, which stays out of the process list)",
			bind: stringFlag(&n.BootstrapToken, "")},
		{name: "shared-read", field: "SharedRead", usage: "read each set of topics once on this node for every subscription reading it (one consumer group per topic set; each subscription a cursor with its own commits); false gives each subscription a consumer group of its own. A cluster moves to it node by node (an upgrade does); back only by stopping every node",
			bind: boolFlagDefault(&n.SharedRead, true)},
		{name: "endpoint-net-http", usage: "send every request with Go's net/http client, HTTP/1.1 included, instead of keyhook's HTTP/1.1 client (about twice the CPU per request)",
			bind: boolFlag(&n.EndpointNetHTTP)},
		{name: "endpoint-concurrency", field: "EndpointConcurrency", usage: "most concurrent requests (each a connection) to one endpoint (scheme://host:port) from this node, over all subscriptions; 0 is no cap (a throttling endpoint gets fewer either way)",
			bind: intFlag(&n.EndpointConcurrency, app.DefaultEndpointConcurrency), check: func() string {
				if n.EndpointConcurrency < 0 {
					return fmt.Sprintf("is %d, must be 0 (no cap) or more", n.EndpointConcurrency)
				}
				return ""
			}},
		{name: "breaker-failures", field: "BreakerFailures", doc: "`0` (off)", usage: "consecutive failed attempts (5xx, 408, 425, timeouts, connection errors; not 429) to one endpoint origin that open its circuit breaker on this node: no requests there but one probe per --breaker-interval, its deliveries wait without spending attempts; 0 is off",
			bind: intFlag(&n.BreakerFailures, 0), check: func() string {
				if n.BreakerFailures < 0 {
					return fmt.Sprintf("is %d, must be 0 (off) or more", n.BreakerFailures)
				}
				return ""
			}},
		{name: "breaker-interval", field: "BreakerInterval", usage: "how long an open circuit breaker waits before its probe (one request at a time); a success closes it, a failure opens it again for as long",
			bind: durationFlag(&n.BreakerInterval, dispatcher.DefaultBreakerInterval), check: positive(&n.BreakerInterval)},
		{name: "traces-exporter", field: "TracesExporter", doc: "`OTEL_TRACES_EXPORTER`, else `none`", usage: "where spans go: none, otlp (configured by the OTEL_EXPORTER_OTLP_* variables) or console; empty uses OTEL_TRACES_EXPORTER, else none",
			bind: stringFlag(&n.TracesExporter, ""), check: func() string {
				switch strings.ToLower(n.TracesExporter) {
				case "", "none", "otlp", "console":
					return ""
				}
				return fmt.Sprintf("is %q, want none, otlp or console", n.TracesExporter)
			}},
		{name: "metrics-token", field: "MetricsToken", usage: "an API token to make exist, with only the metrics scope, at start: the scraper's (prefer KEYHOOK_METRICS_TOKEN)",
			bind: stringFlag(&n.MetricsToken, "")},
		{name: "metrics-public", usage: "serve /metrics without a token (off: it needs a token with the metrics scope, as it names endpoint origins)",
			bind: boolFlag(&n.MetricsPublic)},
		{name: "events-url", field: "Events.URL", usage: "operator endpoint that receives operational events (auto-pause, breaker, dead-letter threshold) as signed POSTs; empty sends none",
			bind: stringFlag(&n.Events.URL, ""), check: func() string {
				if n.Events.URL == "" {
					return ""
				}
				if u, err := url.Parse(n.Events.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					return "must be an absolute http or https URL"
				}
				return ""
			}},
		{name: "events-secret", field: "Events.Secret", usage: "Standard Webhooks secret (whsec_...) the events sent to --events-url are signed with (prefer KEYHOOK_EVENTS_SECRET)",
			bind: stringFlag(&n.Events.Secret, ""), check: func() string {
				switch {
				case n.Events.Secret == "" && n.Events.URL != "":
					return "is required with --events-url: events are signed"
				case n.Events.Secret == "":
					return ""
				}
				if _, err := webhooks.ParseSecret(n.Events.Secret); err != nil {
					return err.Error()
				}
				return ""
			}},
		{name: "events-topic", field: "Events.Topic", usage: "Kafka topic that receives operational events as records; empty writes none",
			bind: stringFlag(&n.Events.Topic, "")},
		{name: "events-dead-letter-threshold", field: "Events.DeadLetterThreshold", usage: "send deadletters.threshold_exceeded when a subscription's dead letters, over every node, reach this many within --events-dead-letter-window; 0 is off",
			bind: int64Flag(&n.Events.DeadLetterThreshold, 0), check: func() string {
				if n.Events.DeadLetterThreshold < 0 {
					return fmt.Sprintf("is %d, must be 0 (off) or more", n.Events.DeadLetterThreshold)
				}
				return ""
			}},
		{name: "events-dead-letter-window", field: "Events.DeadLetterWindow", usage: "the window of --events-dead-letter-threshold, aligned on the clock",
			bind: durationFlag(&n.Events.DeadLetterWindow, monitor.DefaultDeadLetterWindow), check: positive(&n.Events.DeadLetterWindow)},
		{name: "delivery-log", usage: "keep each delivery's attempts (status, latency, response excerpt, error) in Redis, for GET /v1/subscriptions/{id}/deliveries",
			bind: boolFlag(&n.DeliveryLog.Enabled)},
		{name: "delivery-log-ttl", field: "DeliveryLog.TTL", usage: "how long the delivery log keeps a delivery after its latest attempt",
			bind: durationFlag(&n.DeliveryLog.TTL, deliverylog.DefaultTTL), check: func() string {
				if n.DeliveryLog.TTL < time.Second {
					return fmt.Sprintf("is %v, must be at least 1s", n.DeliveryLog.TTL)
				}
				return ""
			}},
		{name: "delivery-log-max", field: "DeliveryLog.MaxDeliveries", usage: "most deliveries the delivery log keeps per subscription; the oldest go first",
			bind: intFlag(&n.DeliveryLog.MaxDeliveries, deliverylog.DefaultMaxDeliveries), check: func() string {
				if n.DeliveryLog.MaxDeliveries < 1 {
					return fmt.Sprintf("is %d, must be positive", n.DeliveryLog.MaxDeliveries)
				}
				return ""
			}},
	}
}

// The binders of knobs, one per flag type.
func stringFlag(p *string, def string) func(*flag.FlagSet, string, string) {
	return func(fs *flag.FlagSet, name, usage string) { fs.StringVar(p, name, def, usage) }
}

func boolFlag(p *bool) func(*flag.FlagSet, string, string) {
	return func(fs *flag.FlagSet, name, usage string) { fs.BoolVar(p, name, false, usage) }
}

func boolFlagDefault(p *bool, def bool) func(*flag.FlagSet, string, string) {
	return func(fs *flag.FlagSet, name, usage string) { fs.BoolVar(p, name, def, usage) }
}

func intFlag(p *int, def int) func(*flag.FlagSet, string, string) {
	return func(fs *flag.FlagSet, name, usage string) { fs.IntVar(p, name, def, usage) }
}

func int64Flag(p *int64, def int64) func(*flag.FlagSet, string, string) {
	return func(fs *flag.FlagSet, name, usage string) { fs.Int64Var(p, name, def, usage) }
}

func durationFlag(p *time.Duration, def time.Duration) func(*flag.FlagSet, string, string) {
	return func(fs *flag.FlagSet, name, usage string) { fs.DurationVar(p, name, def, usage) }
}

// positive is the check of a duration that must be above zero: on the
// command line zero is no default, it is refused.
func positive(p *time.Duration) func() string {
	return func() string {
		if *p <= 0 {
			return fmt.Sprintf("is %v, must be positive", *p)
		}
		return ""
	}
}

// app is the node's configuration: what the knobs set, with the roles,
// version and logger the flags make.
func (c config) app(log *slog.Logger) app.Config {
	n := c.node
	api, dispatcher, _ := c.roles()
	n.Roles = 0
	if api {
		n.Roles |= app.RoleAPI
	}
	if dispatcher {
		n.Roles |= app.RoleDispatcher
	}
	n.Version = version
	n.Logger = log
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
	registryFlags = map[string]string{
		"URL":         "schema-registry-url",
		"Username":    "schema-registry-username",
		"Password":    "schema-registry-password",
		"BearerToken": "schema-registry-bearer-token",
		"TLSCAFile":   "schema-registry-ca-file",
		"TLSCertFile": "schema-registry-cert-file",
		"TLSKeyFile":  "schema-registry-key-file",
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

// addSchemaRegistryFlags declares the Schema Registry flags, named by
// registryFlags, on fs.
func addSchemaRegistryFlags(fs *flag.FlagSet, rc *connect.SchemaRegistryConfig) {
	fs.StringVar(&rc.URL, registryFlags["URL"], "", "Schema Registry base URL (Confluent's REST API; for Apicurio its /apis/ccompat/v7); needed by subscriptions whose value_format or key_format is avro, protobuf or json_schema")
	fs.StringVar(&rc.Username, registryFlags["Username"], "", "Schema Registry user for HTTP basic auth")
	fs.StringVar(&rc.Password, registryFlags["Password"], "", "Schema Registry password; prefer KEYHOOK_SCHEMA_REGISTRY_PASSWORD, which stays out of the process list")
	fs.StringVar(&rc.BearerToken, registryFlags["BearerToken"], "", "Schema Registry bearer token, instead of basic auth; prefer KEYHOOK_SCHEMA_REGISTRY_BEARER_TOKEN")
	fs.StringVar(&rc.TLSCAFile, registryFlags["TLSCAFile"], "", "PEM file of the CAs that sign the Schema Registry's certificate (needs an https:// URL)")
	fs.StringVar(&rc.TLSCertFile, registryFlags["TLSCertFile"], "", "PEM client certificate for the Schema Registry, with --schema-registry-key-file")
	fs.StringVar(&rc.TLSKeyFile, registryFlags["TLSKeyFile"], "", "PEM key of --schema-registry-cert-file")
}

func envName(flagName string) string {
	return "KEYHOOK_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// flags declares on fs every flag of a node: --kafka-brokers, the
// connection flags, and the knobs. The returned function finishes the
// values that need the whole parse (lists, the environment applied).
func (c *config) flags(fs *flag.FlagSet) (knobs []knob, parsed func()) {
	brokers := fs.String("kafka-brokers", "", "comma-separated Kafka seed brokers (host:port)")
	redisParsed := addRedisFlags(fs, &c.Redis)
	// --park-after is bound through it: 0 never parks, in every layer.
	c.node.ParkAfter = new(0)
	knobs = c.knobs()
	for _, k := range knobs {
		k.bind(fs, k.name, k.usage)
	}
	addKafkaFlags(fs, &c.Kafka, &c.node.ConfigTopic)
	addSchemaRegistryFlags(fs, &c.Registry)
	return knobs, func() {
		c.node.Brokers = splitList(*brokers)
		redisParsed()
	}
}

// parseConfig reads flags, then fills every flag not given on the command
// line from its KEYHOOK_* variable. Errors name the flag and its variable.
func parseConfig(cmd string, args []string, getenv func(string) string, stderr io.Writer, requireBackends bool) (config, error) {
	var c config
	fs := flag.NewFlagSet("keyhook "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	knobs, parsed := c.flags(fs)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("keyhook %s: unexpected argument %q", cmd, fs.Arg(0))
	}
	if err := applyEnv(fs, getenv, cmd); err != nil {
		return c, err
	}
	parsed()
	c.node.Getenv, c.node.Console = getenv, stderr
	return c, c.validate(cmd, knobs, requireBackends)
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

func (c config) validate(cmd string, knobs []knob, requireBackends bool) error {
	bad := func(flagName, msg string) error { return flagError(cmd, flagName, msg) }
	if requireBackends {
		if len(c.node.Brokers) == 0 {
			return bad("kafka-brokers", "is required")
		}
		for _, b := range c.node.Brokers {
			if _, port, err := net.SplitHostPort(b); err != nil || port == "" {
				return bad("kafka-brokers", fmt.Sprintf("has %q, want host:port", b))
			}
		}
		if c.Redis.URL == "" {
			return bad("redis-url", "is required")
		}
		if err := c.Redis.Validate(); err != nil {
			return connectError(cmd, err, redisFlags)
		}
	}
	if err := c.Kafka.Validate(); err != nil {
		return connectError(cmd, err, kafkaFlags)
	}
	if err := c.Registry.Validate(); err != nil {
		return connectError(cmd, err, registryFlags)
	}
	if err := (configlog.Config{Topic: c.node.ConfigTopic}).Validate(); err != nil {
		return bad("config-topic", strings.TrimPrefix(err.Error(), "configlog: config: "))
	}
	for _, k := range knobs {
		if k.check == nil {
			continue
		}
		if msg := k.check(); msg != "" {
			return bad(k.name, msg)
		}
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
