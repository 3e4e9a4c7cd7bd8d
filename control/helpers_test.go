package control_test

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

	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/tracking"
	"github.com/keyhook/keyhook/webhooks"
)

// kafkaTiers runs f against kfake, and against the real broker when the
// integration tier is on.
func kafkaTiers(t *testing.T, partitions int32, topics []string, f func(t *testing.T, brokers []string)) {
	t.Run("kfake", func(t *testing.T) {
		f(t, testutil.Kfake(t, partitions, topics...))
	})
	t.Run("kafka", func(t *testing.T) {
		brokers := testutil.RealKafka(t)
		testutil.CreateTopics(t, brokers, partitions, topics...)
		f(t, brokers)
	})
}

// startNode runs a dispatcher node over subs until the test ends.
func startNode(t *testing.T, brokers []string, rdb redis.UniversalClient, subs dispatcher.Subscriptions) {
	t.Helper()
	tracker, err := tracking.New(rdb, tracking.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sender, err := webhooks.NewClient(webhooks.ClientConfig{Policy: webhooks.AddressPolicy{AllowPrivate: true}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	n, err := dispatcher.New(dispatcher.Config{
		NodeID:         fmt.Sprintf("node-%d", time.Now().UnixNano()),
		Brokers:        brokers,
		CommitInterval: 100 * time.Millisecond,
		SessionTimeout: 6 * time.Second,
		Logger:         slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Retry:          webhooks.RetryPolicy{InitialInterval: 20 * time.Millisecond, MaxInterval: 200 * time.Millisecond},
	}, subs, sender, tracker)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("node stopped with error: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Errorf("node did not stop within 60s")
		}
	})
}

func newAdmin(t *testing.T, brokers []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// waitCommitted waits until the group committed every partition's end.
func waitCommitted(t *testing.T, adm *kadm.Client, group string, ends map[int32]int64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	got := map[int32]int64{}
	for time.Now().Before(deadline) {
		offs, err := adm.FetchOffsets(context.Background(), group)
		if err == nil {
			clear(got)
			offs.Each(func(o kadm.OffsetResponse) {
				if o.Err == nil {
					got[o.Partition] = o.At
				}
			})
			done := true
			for p, end := range ends {
				if got[p] != end {
					done = false
				}
			}
			if done {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("commits did not reach the log end in %v: got %v, want %v", timeout, got, ends)
}

// uniqueTopic keeps tests on a shared real broker apart.
func uniqueTopic(_ *testing.T, base string) string {
	return fmt.Sprintf("%s-%d", base, time.Now().UnixNano())
}
