package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/app"
	"github.com/keyhook/keyhook/auth"
	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
)

// stack is a whole node, wired as keyhook serve wires it, on kfake and a
// real Redis, delivering to a real endpoint.
type stack struct {
	url, token string
	node       *dispatcher.Node
	sink       *testutil.Sink
	producer   *kgo.Client
	topic      string
}

func startStack(t *testing.T) *stack {
	t.Helper()
	const topic = "orders"
	brokers := testutil.Kfake(t, 2, topic)
	rdb := testutil.StartRedis(t).Client()
	token := auth.Generate()
	a, err := app.Build(context.Background(), app.Config{
		NodeID: "node-a", Brokers: brokers, HTTPAddr: "127.0.0.1:0", BootstrapToken: token,
		AllowPrivateEndpoints: true, AdminStopTimeout: 20 * time.Second,
		Tuning: dispatcher.Tuning{
			RequestTimeout: 5 * time.Second, FlushInterval: 5 * time.Millisecond, CommitInterval: 20 * time.Millisecond,
			DrainTimeout: 2 * time.Second, SessionTimeout: 6 * time.Second, ResyncInterval: 100 * time.Millisecond,
		},
		Logger: slog.New(slog.DiscardHandler),
	}, app.Deps{Redis: rdb})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("node: %v", err)
		}
	})
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(producer.Close)
	return &stack{url: "http://" + a.APIAddr(), token: token, node: a.Node(), sink: testutil.StartSink(t), producer: producer, topic: topic}
}

func (s *stack) call(t *testing.T, method, path, body string) []byte {
	t.Helper()
	req, _ := http.NewRequest(method, s.url+path, bytes.NewReader([]byte(body)))
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		t.Fatalf("%s %s = %d %s", method, path, resp.StatusCode, b)
	}
	return b
}

// produce writes n records with keys k0..k(n-1) and the given value
// prefix, and waits until Kafka has them.
func (s *stack) produce(t *testing.T, n int, prefix string) {
	t.Helper()
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Key: []byte("k" + strconv.Itoa(i)), Value: []byte(prefix + strconv.Itoa(i))})
	}
	if err := s.producer.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// bodies returns how often each body was delivered with a 2xx.
func (s *stack) bodies() map[string]int {
	out := map[string]int{}
	for _, d := range s.sink.Deliveries() {
		if d.Status < 300 {
			out[string(d.Body)]++
		}
	}
	return out
}

func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// hasGroup reports whether the node runs a consumer for the subscription.
func (s *stack) hasGroup(id string) bool {
	return slices.ContainsFunc(s.node.Stats(), func(g dispatcher.GroupStats) bool { return g.Subscription == id })
}

// TestPauseStopsDeliveriesAndResumeRestartsThem drives pause and resume
// through the API against a real dispatcher: while paused, records wait
// in Kafka; after resume every one is delivered.
func TestPauseStopsDeliveriesAndResumeRestartsThem(t *testing.T) {
	s := startStack(t)
	var sub subscription.Subscription
	if err := json.Unmarshal(s.call(t, "POST", "/v1/subscriptions",
		`{"name":"e2e","topics":["orders"],"endpoint":{"url":"`+s.sink.URL+`"},"dead_letter_topic":"none"}`), &sub); err != nil {
		t.Fatal(err)
	}
	s.produce(t, 10, "a")
	waitUntil(t, "the first records", 15*time.Second, func() bool { return len(s.bodies()) == 10 })

	s.call(t, "POST", "/v1/subscriptions/"+sub.ID+"/pause", "")
	waitUntil(t, "the consumer to stop", 5*time.Second, func() bool { return !s.hasGroup(sub.ID) })
	s.produce(t, 10, "b")
	// Absence cannot be awaited: give a running consumer ample time to
	// have fetched and delivered them.
	time.Sleep(500 * time.Millisecond)
	if n := len(s.bodies()); n != 10 {
		t.Fatalf("%d records delivered while paused, want the 10 from before", n)
	}

	s.call(t, "POST", "/v1/subscriptions/"+sub.ID+"/resume", "")
	waitUntil(t, "the records produced while paused", 15*time.Second, func() bool { return len(s.bodies()) == 20 })
}

// TestSeekRedeliversThroughTheRealDispatcher seeks a subscription back to
// the earliest offsets through the API: every record is delivered again.
func TestSeekRedeliversThroughTheRealDispatcher(t *testing.T) {
	s := startStack(t)
	var sub subscription.Subscription
	if err := json.Unmarshal(s.call(t, "POST", "/v1/subscriptions",
		`{"name":"e2e","topics":["orders"],"endpoint":{"url":"`+s.sink.URL+`"},"dead_letter_topic":"none"}`), &sub); err != nil {
		t.Fatal(err)
	}
	s.produce(t, 8, "r")
	waitUntil(t, "the records", 15*time.Second, func() bool { return len(s.bodies()) == 8 })
	// Let the commits catch up, so that the seek moves them backwards.
	waitUntil(t, "the commits", 10*time.Second, func() bool {
		var st subscription.Status
		_ = json.Unmarshal(s.call(t, "GET", "/v1/subscriptions/"+sub.ID+"/status", ""), &st)
		var lag int64
		for _, p := range st.Partitions {
			lag += p.Lag
		}
		return len(st.Partitions) == 2 && lag == 0
	})

	var res subscription.SeekResult
	if err := json.Unmarshal(s.call(t, "POST", "/v1/subscriptions/"+sub.ID+"/seek", `{"to":"earliest"}`), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Partitions) != 2 {
		t.Fatalf("seek moved %+v, want both partitions", res.Partitions)
	}
	for _, p := range res.Partitions {
		if p.Offset != 0 {
			t.Errorf("partition %d moved from %d to %d, want to 0", p.Partition, p.Previous, p.Offset)
		}
	}
	waitUntil(t, "every record delivered again", 20*time.Second, func() bool {
		b := s.bodies()
		for i := range 8 {
			if b["r"+strconv.Itoa(i)] < 2 {
				return false
			}
		}
		return true
	})
	var after subscription.Subscription
	if err := json.Unmarshal(s.call(t, "GET", "/v1/subscriptions/"+sub.ID, ""), &after); err != nil || after.Paused {
		t.Errorf("after the seek the subscription is %+v, %v; want it running", after, err)
	}
}
