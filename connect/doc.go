// Package connect turns keyhook's connection settings into clients: the
// options of every Kafka client (TLS, mutual TLS, SASL PLAIN and SCRAM) and
// the one Redis client (a single server, a Sentinel-managed primary, or a
// Redis Cluster, over TLS when the URL says rediss://).
//
// It owns the meaning of those settings and their validation: a
// KafkaConfig or RedisConfig that Validate accepts builds, and every error
// names the field at fault through a FieldError, so the command line can
// name the flag. It also adapts two process-wide loggers to slog, go-redis's
// and the standard library's (which net/http writes to), and counts the
// commands a Redis client sends (CountRedisCommands).
//
// It must not know what the clients are used for (groups, topics, keys,
// scripts) nor where the settings came from (flags, environment): callers
// in cmd/keyhook map flags to fields, and dispatcher, tracking and
// subscription take the built clients.
package connect
