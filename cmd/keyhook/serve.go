package main

import (
	"context"
	"errors"
	"io"
	stdlog "log"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/keyhook/keyhook/app"
	"github.com/keyhook/keyhook/connect"
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
	if c.node.SchemaRegistry, err = connect.SchemaRegistry(c.Registry); err != nil {
		return connectError("serve", err, registryFlags)
	}
	rdb, err := connect.NewRedis(c.Redis)
	if err != nil {
		return connectError("serve", err, redisFlags)
	}
	defer rdb.Close()
	log.Info("connections",
		"kafka_tls", c.Kafka.TLS, "kafka_sasl", c.Kafka.SASLMechanism,
		"redis_tls", strings.HasPrefix(c.Redis.URL, "rediss://"),
		"redis_cluster", c.Redis.Cluster, "redis_sentinel_master", c.Redis.SentinelMaster)
	a, err := buildNode(ctx, "serve", c, log, app.Deps{Redis: rdb, KafkaOptions: kafkaOpts})
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// buildNode wires the node the flags describe; a config error names the
// flag it came from.
func buildNode(ctx context.Context, cmd string, c config, log *slog.Logger, deps app.Deps) (*app.App, error) {
	// go-redis logs through a process-wide logger that prints raw lines to
	// stderr; route them through the node's structured log instead.
	redis.SetLogger(connect.RedisLogger{Logger: log})
	// So does net/http, through the standard logger, quoting what an
	// endpoint sent.
	stdlog.SetFlags(0)
	stdlog.SetOutput(connect.StdLogWriter{Logger: log})
	a, err := app.Build(ctx, c.app(log), deps)
	if err != nil {
		return nil, appError(cmd, err, c.appFlags())
	}
	return a, nil
}

// appFlags names the flag of each app.Config field a flag sets.
func (c config) appFlags() map[string]string {
	m := map[string]string{"Brokers": "kafka-brokers", "ConfigTopic": "config-topic", "SchemaRegistry": "schema-registry-url"}
	for _, k := range c.knobs() {
		if k.field != "" {
			m[k.field] = k.name
		}
	}
	return m
}

// appError turns an app.FieldError into the error of the flag the field
// came from, using flags to map field to flag name; any other error is
// only prefixed with the command.
func appError(cmd string, err error, flags map[string]string) error {
	var fe *app.FieldError
	if errors.As(err, &fe) {
		if name, ok := flags[fe.Field]; ok {
			return flagError(cmd, name, fe.Err.Error())
		}
	}
	return errors.New("keyhook " + cmd + ": " + err.Error())
}
