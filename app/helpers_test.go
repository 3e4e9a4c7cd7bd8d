package app_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/app"
	"github.com/keyhook/keyhook/auth"
	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/testutil"
)

// testNode is a whole node (API and dispatcher) built by app.Build and
// running until the test ends.
type testNode struct {
	base    string
	token   string
	rdb     *redis.Client
	brokers []string
}

func startNode(t *testing.T, brokers []string) *testNode {
	t.Helper()
	rdb := testutil.StartRedis(t).Client()
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
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("Run did not return within 30s of the context ending")
		}
	})
	return &testNode{base: "http://" + a.APIAddr(), token: token, rdb: rdb, brokers: brokers}
}

// call sends an API request and decodes a JSON answer into out (when not
// nil); it returns the status code.
func (n *testNode) call(t *testing.T, method, path, body string, out any) int {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, n.base+path, rd)
	req.Header.Set("Authorization", "Bearer "+n.token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s = %d %s: %v", method, path, resp.StatusCode, b, err)
		}
	}
	return resp.StatusCode
}

// scrape returns the node's /metrics text.
func (n *testNode) scrape(t *testing.T) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, n.base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+n.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// subscribe creates a subscription of topic delivering to url and
// returns its id.
func (n *testNode) subscribe(t *testing.T, topic, url string) string {
	t.Helper()
	var sub struct{ ID string }
	if code := n.call(t, http.MethodPost, "/v1/subscriptions",
		`{"name":"`+topic+`","topics":["`+topic+`"],"endpoint":{"url":"`+url+`"}}`, &sub); code != http.StatusCreated {
		t.Fatalf("create subscription = %d", code)
	}
	return sub.ID
}

// deadLetters returns how many dead letters the subscription lists.
func (n *testNode) deadLetters(t *testing.T, id string) int {
	t.Helper()
	var page struct{ Items []json.RawMessage }
	if code := n.call(t, http.MethodGet, "/v1/subscriptions/"+id+"/dead-letters", "", &page); code != http.StatusOK {
		t.Fatalf("list dead letters = %d", code)
	}
	return len(page.Items)
}

func produce(t *testing.T, brokers []string, topic string, recs ...*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, r := range recs {
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// eventually polls cond every 50ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
