package app_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/keyhook/keyhook/app"
	"github.com/keyhook/keyhook/auth"
	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/nodes"
	"github.com/keyhook/keyhook/webhooks"
)

func TestValidateNamesTheField(t *testing.T) {
	ok := app.Config{Brokers: []string{"127.0.0.1:9092"}}
	tests := []struct {
		name  string
		mod   func(*app.Config)
		field string
	}{
		{"no brokers", func(c *app.Config) { c.Brokers = nil }, "Brokers"},
		{"broker without a port", func(c *app.Config) { c.Brokers = []string{"kafka"} }, "Brokers"},
		{"unknown role", func(c *app.Config) { c.Roles = 8 }, "Roles"},
		{"address without a port", func(c *app.Config) { c.HTTPAddr = "localhost" }, "HTTPAddr"},
		{"negative flush interval", func(c *app.Config) { c.FlushInterval = -time.Second }, "FlushInterval"},
		{"negative drain timeout", func(c *app.Config) { c.DrainTimeout = -time.Second }, "DrainTimeout"},
		{"negative window", func(c *app.Config) { c.MaxWindow = -1 }, "MaxWindow"},
		{"negative endpoint cap", func(c *app.Config) { c.EndpointConcurrency = -1 }, "EndpointConcurrency"},
		{"bad retry policy", func(c *app.Config) { c.Retry = webhooks.RetryPolicy{MaxAttempts: -1} }, "Retry"},
		{"unknown exporter", func(c *app.Config) { c.TracesExporter = "zipkin" }, "TracesExporter"},
	}
	if err := ok.Validate(); err != nil {
		t.Fatalf("Config with brokers only: %v, want valid (zero means default)", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.mod(&c)
			var fe *app.FieldError
			if err := c.Validate(); !errors.As(err, &fe) || fe.Field != tt.field {
				t.Fatalf("Validate() = %v, want a FieldError naming %s", err, tt.field)
			}
		})
	}
}

func TestBuildNeedsRedis(t *testing.T) {
	_, err := app.Build(context.Background(), app.Config{Brokers: []string{"127.0.0.1:9092"}}, app.Deps{})
	if err == nil || !strings.Contains(err.Error(), "Redis") {
		t.Fatalf("Build without Redis = %v, want an error naming Deps.Redis", err)
	}
}

func TestBuildOnABusyPortNamesHTTPAddr(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	rdb := testutil.StartRedis(t).Client()
	_, err = app.Build(context.Background(), app.Config{
		Brokers: testutil.Kfake(t, 1, "t"), HTTPAddr: ln.Addr().String(), Logger: slog.New(slog.DiscardHandler),
	}, app.Deps{Redis: rdb})
	var fe *app.FieldError
	if !errors.As(err, &fe) || fe.Field != "HTTPAddr" {
		t.Fatalf("Build on a busy port = %v, want a FieldError naming HTTPAddr", err)
	}
}

// A metrics series cap that is not a number stops the build with an
// error naming the variable, not a flag it did not come from.
func TestBuildWithABadCardinalityLimitNamesTheVariable(t *testing.T) {
	rdb := testutil.StartRedis(t).Client()
	_, err := app.Build(context.Background(), app.Config{
		Brokers: testutil.Kfake(t, 1, "t"), Logger: slog.New(slog.DiscardHandler),
		Getenv: func(k string) string {
			if k == "OTEL_GO_X_CARDINALITY_LIMIT" {
				return "lots"
			}
			return ""
		},
	}, app.Deps{Redis: rdb})
	var fe *app.FieldError
	if err == nil || !strings.Contains(err.Error(), "OTEL_GO_X_CARDINALITY_LIMIT") || errors.As(err, &fe) {
		t.Fatalf("Build = %v, want an error naming OTEL_GO_X_CARDINALITY_LIMIT and no Config field", err)
	}
}

// TestNodeDeliversThroughTheAPIAndStopsCleanly runs a whole node built by
// Build: a subscription created through its API is delivered, and once
// the context ends Run returns nil with the API closed, the group's
// commits at the log end and the node gone from the registry.
func TestNodeDeliversThroughTheAPIAndStopsCleanly(t *testing.T) {
	const topic = "orders"
	brokers := testutil.Kfake(t, 2, topic)
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	token := auth.Generate()
	a, err := app.Build(context.Background(), app.Config{
		NodeID: "node-a", Brokers: brokers, HTTPAddr: "127.0.0.1:0", BootstrapToken: token,
		AllowPrivateEndpoints: true, Logger: slog.New(slog.DiscardHandler),
		Tuning: dispatcher.Tuning{CommitInterval: 20 * time.Millisecond, SessionTimeout: 6 * time.Second, ResyncInterval: 100 * time.Millisecond},
	}, app.Deps{Redis: rdb})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer cancel()

	base := "http://" + a.APIAddr()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/subscriptions", strings.NewReader(
		`{"name":"app","topics":["orders"],"endpoint":{"url":"`+sink.URL+`"},"dead_letter_topic":"none"}`))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var sub struct{ ID string }
	_ = json.NewDecoder(resp.Body).Decode(&sub)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create subscription = %d", resp.StatusCode)
	}
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	for i := range 20 {
		if err := producer.ProduceSync(ctx, &kgo.Record{Key: []byte{byte('a' + i%5)}, Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	sink.WaitAcked(t, 20, 15*time.Second)
	reg, _ := nodes.New(rdb, nodes.Config{})
	if list, err := reg.List(ctx); err != nil || len(list) != 1 {
		t.Fatalf("registry lists %v, %v; want this node", list, err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v, want nil after the context ended", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30s of the context ending")
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("the API still answers after Run returned")
	}
	if list, err := reg.List(context.Background()); err != nil || len(list) != 0 {
		t.Errorf("registry lists %v, %v after Run returned; want the node removed", list, err)
	}
}

// The API closes a keep-alive connection that stays idle past
// APIIdleTimeout: idle clients cannot hold connections forever.
func TestAPIClosesIdleConnections(t *testing.T) {
	rdb := testutil.StartRedis(t).Client()
	a, err := app.Build(context.Background(), app.Config{
		NodeID: "node-idle", Brokers: testutil.Kfake(t, 1), HTTPAddr: "127.0.0.1:0", Roles: app.RoleAPI,
		APIIdleTimeout: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
	}, app.Deps{Redis: rdb})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()

	conn, err := net.Dial("tcp", a.APIAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: keyhook\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// Idle now: the server must close the connection on its side.
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	started := time.Now()
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("idle keep-alive connection: read = %v after %v, want EOF (closed by the server)", err, time.Since(started))
	}
}

// The node counts the commands its Redis client sends, in the meter it
// reports to.
func TestBuildCountsTheCommandsItsRedisClientSends(t *testing.T) {
	rdb := testutil.StartRedis(t).Client()
	reader := sdkmetric.NewManualReader()
	a, err := app.Build(context.Background(), app.Config{
		NodeID: "node-count", Brokers: testutil.Kfake(t, 1), HTTPAddr: "127.0.0.1:0", Roles: app.RoleAPI,
		Logger: slog.New(slog.DiscardHandler),
	}, app.Deps{Redis: rdb, MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	sent := testutil.Int64Metric(t, reader, "keyhook.redis.commands")
	if sent < 1 {
		t.Errorf("keyhook.redis.commands = %d after a PING; want it counted", sent)
	}
}
