package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/keyhook/keyhook/connect"
	"github.com/keyhook/keyhook/dispatcher"
)

// backends are the required flags of keyhook serve, valid and never dialed
// by these tests.
var backends = []string{"--kafka-brokers", "127.0.0.1:9092", "--redis-url", "redis://127.0.0.1:6379/0"}

func noEnv(string) string { return "" }

func TestConnectionFlagErrorsNameTheFlag(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string // the flag and its variable, as the error must name them
	}{
		{"unknown SASL mechanism", []string{"--kafka-sasl-mechanism", "gssapi", "--kafka-sasl-username", "u", "--kafka-sasl-password", "p"},
			nil, "--kafka-sasl-mechanism (KEYHOOK_KAFKA_SASL_MECHANISM)"},
		{"unknown SASL mechanism from the environment", []string{"--kafka-sasl-username", "u", "--kafka-sasl-password", "p"},
			map[string]string{"KEYHOOK_KAFKA_SASL_MECHANISM": "oauthbearer"}, "--kafka-sasl-mechanism (KEYHOOK_KAFKA_SASL_MECHANISM)"},
		{"SASL without user", []string{"--kafka-sasl-mechanism", "scram-sha-512", "--kafka-sasl-password", "p"},
			nil, "--kafka-sasl-username (KEYHOOK_KAFKA_SASL_USERNAME)"},
		{"SASL without password", []string{"--kafka-sasl-mechanism", "plain", "--kafka-sasl-username", "u"},
			nil, "--kafka-sasl-password (KEYHOOK_KAFKA_SASL_PASSWORD)"},
		{"password and password file", []string{"--kafka-sasl-mechanism", "plain", "--kafka-sasl-username", "u", "--kafka-sasl-password", "p", "--kafka-sasl-password-file", "/run/secrets/p"},
			nil, "--kafka-sasl-password-file (KEYHOOK_KAFKA_SASL_PASSWORD_FILE)"},
		{"user without mechanism", []string{"--kafka-sasl-username", "u"},
			nil, "--kafka-sasl-username (KEYHOOK_KAFKA_SASL_USERNAME)"},
		{"cert without key", []string{"--kafka-tls", "--kafka-tls-cert-file", "/tls/client.crt"},
			nil, "--kafka-tls-cert-file (KEYHOOK_KAFKA_TLS_CERT_FILE)"},
		{"key without cert", []string{"--kafka-tls", "--kafka-tls-key-file", "/tls/client.key"},
			nil, "--kafka-tls-key-file (KEYHOOK_KAFKA_TLS_KEY_FILE)"},
		{"CA without TLS", []string{"--kafka-tls-ca-file", "/tls/ca.crt"},
			nil, "--kafka-tls-ca-file (KEYHOOK_KAFKA_TLS_CA_FILE)"},
		{"insecure skip verify without TLS", []string{"--kafka-tls-insecure-skip-verify"},
			nil, "--kafka-tls-insecure-skip-verify (KEYHOOK_KAFKA_TLS_INSECURE_SKIP_VERIFY)"},
		{"insecure skip verify with a CA", []string{"--kafka-tls", "--kafka-tls-insecure-skip-verify", "--kafka-tls-ca-file", "/tls/ca.crt"},
			nil, "--kafka-tls-insecure-skip-verify (KEYHOOK_KAFKA_TLS_INSECURE_SKIP_VERIFY)"},
		{"bad boolean from the environment", nil,
			map[string]string{"KEYHOOK_KAFKA_TLS": "maybe"}, "--kafka-tls"},
		{"Redis CA with a plaintext URL", []string{"--redis-tls-ca-file", "/tls/ca.crt"},
			nil, "--redis-tls-ca-file (KEYHOOK_REDIS_TLS_CA_FILE)"},
		{"Redis cert without key", []string{"--redis-url", "rediss://127.0.0.1:6380/0", "--redis-tls-cert-file", "/tls/client.crt"},
			nil, "--redis-tls-cert-file (KEYHOOK_REDIS_TLS_CERT_FILE)"},
		{"Redis cluster and Sentinel", []string{"--redis-cluster", "--redis-sentinel-master", "mymaster"},
			nil, "--redis-cluster (KEYHOOK_REDIS_CLUSTER)"},
		{"Redis addrs for a single server", []string{"--redis-addrs", "10.0.0.1:6379"},
			nil, "--redis-addrs (KEYHOOK_REDIS_ADDRS)"},
		{"Redis addr without port", []string{"--redis-cluster", "--redis-addrs", "10.0.0.1"},
			nil, "--redis-addrs (KEYHOOK_REDIS_ADDRS)"},
		{"Redis cluster on database 2", []string{"--redis-url", "redis://127.0.0.1:6379/2", "--redis-cluster"},
			nil, "--redis-url (KEYHOOK_REDIS_URL)"},
		{"malformed Redis URL", []string{"--redis-url", "redis://u:p@host:port/0"},
			nil, "--redis-url (KEYHOOK_REDIS_URL) is not a valid Redis URL"},
		{"registry user without a URL", []string{"--schema-registry-username", "u"},
			nil, "--schema-registry-username (KEYHOOK_SCHEMA_REGISTRY_USERNAME) is set, but URL is not"},
		{"registry URL without a scheme", []string{"--schema-registry-url", "registry:8081"},
			nil, "--schema-registry-url (KEYHOOK_SCHEMA_REGISTRY_URL)"},
		{"registry basic auth and a bearer token", []string{"--schema-registry-url", "https://registry:8081", "--schema-registry-username", "u"},
			map[string]string{"KEYHOOK_SCHEMA_REGISTRY_BEARER_TOKEN": "t"}, "--schema-registry-bearer-token (KEYHOOK_SCHEMA_REGISTRY_BEARER_TOKEN)"},
		{"registry CA with http", []string{"--schema-registry-url", "http://registry:8081", "--schema-registry-ca-file", "/tls/ca.crt"},
			nil, "--schema-registry-ca-file (KEYHOOK_SCHEMA_REGISTRY_CA_FILE)"},
		{"registry cert without key", []string{"--schema-registry-url", "https://registry:8081", "--schema-registry-cert-file", "/tls/client.crt"},
			nil, "--schema-registry-cert-file (KEYHOOK_SCHEMA_REGISTRY_CERT_FILE)"},
		{"config topic with a space", []string{"--config-topic", "keyhook config"},
			nil, "--config-topic (KEYHOOK_CONFIG_TOPIC)"},
		{"config topic from the environment", nil,
			map[string]string{"KEYHOOK_CONFIG_TOPIC": "a/b"}, "--config-topic (KEYHOOK_CONFIG_TOPIC)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) string { return tc.env[k] }
			// Later flags win, so a case's --redis-url replaces the default.
			_, err := parseConfig("serve", append(append([]string{}, backends...), tc.args...), getenv, io.Discard, true)
			if err == nil {
				t.Fatalf("parseConfig accepted %v %v", tc.args, tc.env)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not name %s", err, tc.want)
			}
		})
	}
}

func TestConnectionFlagsAndVariablesFillTheConfig(t *testing.T) {
	env := map[string]string{
		"KEYHOOK_KAFKA_TLS":                "true",
		"KEYHOOK_KAFKA_TLS_CA_FILE":        "/tls/kafka-ca.crt",
		"KEYHOOK_KAFKA_SASL_MECHANISM":     "scram-sha-512",
		"KEYHOOK_KAFKA_SASL_USERNAME":      "keyhook",
		"KEYHOOK_KAFKA_SASL_PASSWORD_FILE": "/run/secrets/kafka-password",
		"KEYHOOK_REDIS_URL":                "rediss://keyhook:pw@redis:6379/0",
		"KEYHOOK_REDIS_CLUSTER":            "true",
		"KEYHOOK_REDIS_ADDRS":              "redis-0:6379, redis-1:6379,,redis-2:6379",
	}
	args := []string{
		"--kafka-brokers", "kafka:9093",
		"--kafka-tls-server-name", "kafka.internal",
		"--kafka-tls-cert-file", "/tls/client.crt", "--kafka-tls-key-file", "/tls/client.key",
		"--redis-tls-ca-file", "/tls/redis-ca.crt",
	}
	c, err := parseConfig("serve", args, func(k string) string { return env[k] }, io.Discard, true)
	if err != nil {
		t.Fatalf("parseConfig: %v", err)
	}
	wantKafka := connect.KafkaConfig{
		TLS: true, TLSCAFile: "/tls/kafka-ca.crt", TLSServerName: "kafka.internal",
		TLSCertFile: "/tls/client.crt", TLSKeyFile: "/tls/client.key",
		SASLMechanism: "scram-sha-512", SASLUsername: "keyhook", SASLPasswordFile: "/run/secrets/kafka-password",
	}
	if diff := cmp.Diff(wantKafka, c.Kafka); diff != "" {
		t.Errorf("Kafka connection (-want +got):\n%s", diff)
	}
	wantRedis := connect.RedisConfig{
		URL: "rediss://keyhook:pw@redis:6379/0", TLSCAFile: "/tls/redis-ca.crt",
		Cluster: true, Addrs: []string{"redis-0:6379", "redis-1:6379", "redis-2:6379"},
	}
	if diff := cmp.Diff(wantRedis, c.Redis); diff != "" {
		t.Errorf("Redis connection (-want +got):\n%s", diff)
	}
	c, err = parseConfig("serve", append(args, "--schema-registry-url", "https://registry:8081", "--schema-registry-username", "keyhook"),
		func(k string) string {
			if k == "KEYHOOK_SCHEMA_REGISTRY_PASSWORD" {
				return "pw"
			}
			return env[k]
		}, io.Discard, true)
	if err != nil {
		t.Fatalf("parseConfig: %v", err)
	}
	wantRegistry := connect.SchemaRegistryConfig{URL: "https://registry:8081", Username: "keyhook", Password: "pw"}
	if diff := cmp.Diff(wantRegistry, c.Registry); diff != "" {
		t.Errorf("Schema Registry connection (-want +got):\n%s", diff)
	}
}

func TestDefaultConnectionsAreUnchanged(t *testing.T) {
	c, err := parseConfig("serve", backends, noEnv, io.Discard, true)
	if err != nil {
		t.Fatalf("parseConfig: %v", err)
	}
	if diff := cmp.Diff(connect.KafkaConfig{}, c.Kafka); diff != "" {
		t.Errorf("Kafka connection without flags (-want +got):\n%s", diff)
	}
	want := connect.RedisConfig{URL: "redis://127.0.0.1:6379/0"}
	if diff := cmp.Diff(want, c.Redis, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("Redis connection without flags (-want +got):\n%s", diff)
	}
}

// Files are read when serve starts, before anything is dialed; an error
// there names the flag too.
func TestServeStopsOnUnreadableConnectionFiles(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"Kafka CA file without a certificate", []string{"--kafka-tls", "--kafka-tls-ca-file", notPEM},
			"--kafka-tls-ca-file (KEYHOOK_KAFKA_TLS_CA_FILE)"},
		{"missing Kafka password file", []string{"--kafka-sasl-mechanism", "plain", "--kafka-sasl-username", "u", "--kafka-sasl-password-file", missing},
			"--kafka-sasl-password-file (KEYHOOK_KAFKA_SASL_PASSWORD_FILE)"},
		{"missing Redis CA file", []string{"--redis-url", "rediss://127.0.0.1:6380/0", "--redis-tls-ca-file", missing},
			"--redis-tls-ca-file (KEYHOOK_REDIS_TLS_CA_FILE)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{"serve"}, backends...), tc.args...)
			err := run(context.Background(), args, noEnv, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run(%v) = %v, want an error naming %s", args, err, tc.want)
			}
		})
	}
}

// The knobs reach the node as they were given, nothing translated: 0
// never parks on the command line and in every layer below it, and a
// flag left alone is the default of the layer that owns it. The shared read
// is the one default serve owns itself (the dispatcher's zero value keeps a
// group per subscription for embedders), so it arrives on unless turned off.
func TestKnobsReachTheNodeAsGiven(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want dispatcher.Tuning
	}{
		{"defaults", nil, dispatcher.Tuning{SharedRead: true}.WithDefaults()},
		{"never park", []string{"--park-after", "0", "--max-window", "50", "--flush-interval", "5ms", "--max-parked-bytes", "4096"},
			dispatcher.Tuning{ParkAfter: new(0), MaxWindow: 50, FlushInterval: 5 * time.Millisecond, MaxParkedBytes: 4096, SharedRead: true}.WithDefaults()},
		{"a group per subscription", []string{"--shared-read=false"}, dispatcher.Tuning{}.WithDefaults()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseConfig("serve", append(append([]string{}, backends...), tc.args...), noEnv, io.Discard, true)
			if err != nil {
				t.Fatalf("parseConfig: %v", err)
			}
			got := c.app(nil).Tuning.WithDefaults() // as app.Build applies them
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("the node's tuning (-want +got):\n%s", diff)
			}
		})
	}
}
