package deadletter_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/deadletter"
	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/tracking"
	"github.com/keyhook/keyhook/webhooks"
)

// startNode runs a dispatcher node over subs until the test ends.
func startNode(t *testing.T, brokers []string, rdb redis.UniversalClient, subs dispatcher.Subscriptions) {
	t.Helper()
	t.Cleanup(runNode(t, brokers, rdb, subs, 0))
}

// runNode runs a dispatcher node over subs until stop is called; drain 0
// means the default DrainTimeout.
func runNode(t *testing.T, brokers []string, rdb redis.UniversalClient, subs dispatcher.Subscriptions, drain time.Duration) (stop func()) {
	t.Helper()
	tracker, err := tracking.New(rdb, tracking.Config{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := dispatcher.New(dispatcher.Config{
		NodeID:  fmt.Sprintf("node-%d", time.Now().UnixNano()),
		Brokers: brokers,
		Tuning: dispatcher.Tuning{
			CommitInterval: 100 * time.Millisecond,
			SessionTimeout: 6 * time.Second,
			DrainTimeout:   drain,
			Retry:          webhooks.RetryPolicy{InitialInterval: 20 * time.Millisecond, MaxInterval: 200 * time.Millisecond},
		},
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Redrives: newQueue(t, rdb),
	}, subs, newSender(t), tracker)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	return func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("node stopped with error: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Errorf("node did not stop within 60s")
		}
	}
}

func newSender(t *testing.T) *webhooks.Client {
	t.Helper()
	sender, err := webhooks.NewClient(webhooks.ClientConfig{Policy: webhooks.AddressPolicy{AllowPrivate: true}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return sender
}

func newQueue(t *testing.T, rdb redis.UniversalClient) *deadletter.Queue {
	t.Helper()
	q, err := deadletter.NewQueue(rdb, deadletter.QueueConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// newReader builds a dead-letter reader whose redrives queue in rdb for
// the node of startNode to send.
func newReader(t *testing.T, brokers []string, rdb redis.UniversalClient) *deadletter.Reader {
	t.Helper()
	r, err := deadletter.NewReader([]kgo.Opt{kgo.SeedBrokers(brokers...)}, newQueue(t, rdb), deadletter.ReaderConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

func newClient(t *testing.T, brokers []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func newAdminClient(t *testing.T, brokers []string) *kadm.Client {
	t.Helper()
	return kadm.NewClient(newClient(t, brokers))
}

// produce writes records to partition 0 of topic, one per value, each
// with headers hs.
func produce(t *testing.T, brokers []string, topic string, hs []kgo.RecordHeader, values ...string) {
	t.Helper()
	cl := newClient(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for i, v := range values {
		r := &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i%4), Value: []byte(v), Headers: hs}
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// waitDeliveries waits until the sink answered n requests.
func waitDeliveries(t *testing.T, sink *testutil.Sink, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for len(sink.Deliveries()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("the endpoint answered %d requests in %v, want %d", len(sink.Deliveries()), timeout, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
