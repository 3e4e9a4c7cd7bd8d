package connect_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/connect"
	"github.com/keyhook/keyhook/internal/testutil"
)

const kafkaTopic = "orders"

// startKfake starts a one-broker kfake cluster with opts and a seeded topic,
// and returns its seed brokers.
func startKfake(t *testing.T, opts ...kfake.Opt) []string {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(1, kafkaTopic)}, opts...)...)
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// produce builds a client from cfg and produces one record, which takes
// the connection, the authentication, a metadata request and a produce
// request. It returns the first error on that path: a failed connection
// or authentication fails the Ping before it, at once, where a produce
// would retry it until its deadline.
func produce(t *testing.T, brokers []string, cfg connect.KafkaConfig) error {
	t.Helper()
	opts, err := connect.KafkaOptions(cfg)
	if err != nil {
		t.Fatalf("KafkaOptions(%+v): %v", cfg, err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(brokers...), kgo.RequestRetries(0))...)
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := cl.Ping(ctx); err != nil {
		return err
	}
	return cl.ProduceSync(ctx, &kgo.Record{Topic: kafkaTopic, Value: []byte("v")}).FirstErr()
}

func TestKafkaSASLMechanismsAuthenticateAgainstKfake(t *testing.T) {
	for _, tc := range []struct {
		mechanism string // as a user writes it
		kfake     string // as kfake names it
	}{
		{"plain", "PLAIN"},
		{"scram-sha-256", "SCRAM-SHA-256"},
		{"SCRAM-SHA-512", "SCRAM-SHA-512"},
	} {
		t.Run(tc.mechanism, func(t *testing.T) {
			t.Parallel()
			brokers := startKfake(t, kfake.EnableSASL(), kfake.Superuser(tc.kfake, "keyhook", "s3cret"))
			good := connect.KafkaConfig{SASLMechanism: tc.mechanism, SASLUsername: "keyhook", SASLPassword: "s3cret"}
			if err := produce(t, brokers, good); err != nil {
				t.Fatalf("produce with the right password: %v", err)
			}
			bad := good
			bad.SASLPassword = "wrong"
			if err := produce(t, brokers, bad); err == nil {
				t.Fatal("produce with a wrong password succeeded, want an authentication error")
			}
			if err := produce(t, brokers, connect.KafkaConfig{}); err == nil {
				t.Fatal("produce without SASL succeeded on a SASL-only broker")
			}
		})
	}
}

func TestKafkaSASLPasswordFileIsReadAtEveryAuthentication(t *testing.T) {
	brokers := startKfake(t, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "keyhook", "rotated"))
	file := filepath.Join(t.TempDir(), "password")
	// A Kubernetes Secret mounted as a file often ends with a line break.
	if err := os.WriteFile(file, []byte("before-rotation\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := connect.KafkaConfig{SASLMechanism: "scram-sha-512", SASLUsername: "keyhook", SASLPasswordFile: file}
	opts, err := connect.KafkaOptions(cfg)
	if err != nil {
		t.Fatalf("KafkaOptions: %v", err)
	}
	// The Secret rotates after the options were built: the next
	// connection must use the new password.
	if err := os.WriteFile(file, []byte("rotated\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(brokers...))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: kafkaTopic, Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatalf("produce after the password file changed: %v", err)
	}
}

func TestKafkaTLSAgainstKfake(t *testing.T) {
	files := testutil.GenerateTLS(t)
	tlsBrokers := startKfake(t, kfake.TLS(files.ServerConfig(false)))
	mtlsBrokers := startKfake(t, kfake.TLS(files.ServerConfig(true)))
	named := testutil.GenerateTLS(t, "kafka.keyhook.test")
	namedBrokers := startKfake(t, kfake.TLS(named.ServerConfig(false)))
	scramBrokers := startKfake(t, kfake.TLS(files.ServerConfig(true)), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "keyhook", "s3cret"))

	for _, tc := range []struct {
		name    string
		brokers []string
		cfg     connect.KafkaConfig
		wantErr string // substring of the error; "" for success
	}{
		{"CA file verifies the broker", tlsBrokers,
			connect.KafkaConfig{TLS: true, TLSCAFile: files.CAFile}, ""},
		{"system roots refuse a private CA", tlsBrokers,
			connect.KafkaConfig{TLS: true}, "certificate"},
		{"insecure skip verify accepts any certificate", tlsBrokers,
			connect.KafkaConfig{TLS: true, TLSInsecureSkipVerify: true}, ""},
		{"client certificate passes mutual TLS", mtlsBrokers,
			connect.KafkaConfig{TLS: true, TLSCAFile: files.CAFile, TLSCertFile: files.ClientCertFile, TLSKeyFile: files.ClientKeyFile}, ""},
		{"no client certificate fails mutual TLS", mtlsBrokers,
			connect.KafkaConfig{TLS: true, TLSCAFile: files.CAFile}, "certificate"},
		{"server name matches a certificate without the dialed IP", namedBrokers,
			connect.KafkaConfig{TLS: true, TLSCAFile: named.CAFile, TLSServerName: "kafka.keyhook.test"}, ""},
		{"dialed IP does not match that certificate", namedBrokers,
			connect.KafkaConfig{TLS: true, TLSCAFile: named.CAFile}, "127.0.0.1"},
		{"SCRAM over mutual TLS", scramBrokers,
			connect.KafkaConfig{
				TLS: true, TLSCAFile: files.CAFile, TLSCertFile: files.ClientCertFile, TLSKeyFile: files.ClientKeyFile,
				SASLMechanism: "scram-sha-256", SASLUsername: "keyhook", SASLPassword: "s3cret",
			}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := produce(t, tc.brokers, tc.cfg)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("produce: %v", err)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("produce succeeded, want an error containing %q", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("produce error %q, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

func TestKafkaConfigErrorsNameTheField(t *testing.T) {
	files := testutil.GenerateTLS(t)
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	notPEM := filepath.Join(dir, "not.pem")
	for path, content := range map[string]string{empty: "\n", notPEM: "not a certificate"} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	missing := filepath.Join(dir, "missing")
	sasl := func(c connect.KafkaConfig) connect.KafkaConfig {
		c.SASLMechanism, c.SASLUsername = "plain", "keyhook"
		return c
	}
	for _, tc := range []struct {
		name      string
		cfg       connect.KafkaConfig
		wantField string
	}{
		{"unknown mechanism", connect.KafkaConfig{SASLMechanism: "gssapi", SASLUsername: "u", SASLPassword: "p"}, "SASLMechanism"},
		{"mechanism without user", connect.KafkaConfig{SASLMechanism: "plain", SASLPassword: "p"}, "SASLUsername"},
		{"mechanism without password", sasl(connect.KafkaConfig{}), "SASLPassword"},
		{"password and password file", sasl(connect.KafkaConfig{SASLPassword: "p", SASLPasswordFile: empty}), "SASLPasswordFile"},
		{"user without mechanism", connect.KafkaConfig{SASLUsername: "u"}, "SASLUsername"},
		{"password without mechanism", connect.KafkaConfig{SASLPassword: "p"}, "SASLPassword"},
		{"password file without mechanism", connect.KafkaConfig{SASLPasswordFile: empty}, "SASLPasswordFile"},
		{"CA without TLS", connect.KafkaConfig{TLSCAFile: files.CAFile}, "TLSCAFile"},
		{"server name without TLS", connect.KafkaConfig{TLSServerName: "kafka"}, "TLSServerName"},
		{"insecure without TLS", connect.KafkaConfig{TLSInsecureSkipVerify: true}, "TLSInsecureSkipVerify"},
		{"insecure with a CA", connect.KafkaConfig{TLS: true, TLSInsecureSkipVerify: true, TLSCAFile: files.CAFile}, "TLSInsecureSkipVerify"},
		{"cert without key", connect.KafkaConfig{TLS: true, TLSCertFile: files.ClientCertFile}, "TLSCertFile"},
		{"key without cert", connect.KafkaConfig{TLS: true, TLSKeyFile: files.ClientKeyFile}, "TLSKeyFile"},
		// The rest pass Validate and fail when the files are read.
		{"missing CA file", connect.KafkaConfig{TLS: true, TLSCAFile: missing}, "TLSCAFile"},
		{"CA file without PEM", connect.KafkaConfig{TLS: true, TLSCAFile: notPEM}, "TLSCAFile"},
		{"key that does not match the cert", connect.KafkaConfig{TLS: true, TLSCertFile: files.ClientCertFile, TLSKeyFile: files.ServerKeyFile}, "TLSCertFile"},
		{"missing password file", sasl(connect.KafkaConfig{SASLPasswordFile: missing}), "SASLPasswordFile"},
		{"empty password file", sasl(connect.KafkaConfig{SASLPasswordFile: empty}), "SASLPasswordFile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := connect.KafkaOptions(tc.cfg)
			var fe *connect.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("KafkaOptions error %v, want a *connect.FieldError for %s", err, tc.wantField)
			}
			if fe.Field != tc.wantField {
				t.Fatalf("KafkaOptions error names %s (%v), want %s", fe.Field, err, tc.wantField)
			}
		})
	}
}

func TestKafkaZeroConfigAddsNoOptions(t *testing.T) {
	opts, err := connect.KafkaOptions(connect.KafkaConfig{})
	if err != nil || len(opts) != 0 {
		t.Fatalf("KafkaOptions(zero) = %d options, %v; want none, nil", len(opts), err)
	}
}
