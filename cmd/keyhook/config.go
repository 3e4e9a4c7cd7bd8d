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

	"github.com/redis/go-redis/v9"
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
	RequestTimeout        time.Duration
}

// flagDef binds one flag to its environment twin.
type flagDef struct {
	name, env, usage string
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
	fs.StringVar(&c.RedisURL, "redis-url", "", "Redis URL, redis://[user:password@]host:port/db")
	fs.StringVar(&c.HTTPAddr, "http-addr", "127.0.0.1:8080", "address the REST API listens on")
	fs.StringVar(&c.NodeID, "node-id", "", "this node's name in tracking state and status (default hostname-pid)")
	fs.BoolVar(&c.AllowPrivateEndpoints, "allow-private-endpoints", false, "allow endpoints on loopback, private and link-local addresses")
	fs.StringVar(&c.Roles, "roles", "api,dispatcher", "roles this process runs: api, dispatcher or both")
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.LogFormat, "log-format", "text", "log format: text or json")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", 10*time.Second, "how long a released partition waits for in-flight deliveries")
	fs.DurationVar(&c.FlushInterval, "flush-interval", 20*time.Millisecond, "how often acked offsets are written to Redis")
	fs.DurationVar(&c.CommitInterval, "commit-interval", time.Second, "how often the watermark is committed to Kafka")
	fs.DurationVar(&c.SessionTimeout, "session-timeout", 10*time.Second, "Kafka consumer group session timeout")
	fs.Int64Var(&c.MaxWindow, "max-window", 10000, "records per partition between watermark and fetch position before fetching pauses")
	fs.DurationVar(&c.RequestTimeout, "request-timeout", 30*time.Second, "timeout of one delivery attempt")
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
	for _, b := range strings.Split(*brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			c.KafkaBrokers = append(c.KafkaBrokers, b)
		}
	}
	if c.NodeID == "" {
		host, _ := os.Hostname()
		c.NodeID = host + "-" + strconv.Itoa(os.Getpid())
	}
	return c, c.validate(cmd, requireBackends)
}

func (c config) validate(cmd string, requireBackends bool) error {
	bad := func(flagName, msg string) error {
		return fmt.Errorf("keyhook %s: --%s (%s) %s", cmd, flagName, envName(flagName), msg)
	}
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
		if _, err := redis.ParseURL(c.RedisURL); err != nil {
			return bad("redis-url", fmt.Sprintf("is not a valid Redis URL: %v", err))
		}
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
