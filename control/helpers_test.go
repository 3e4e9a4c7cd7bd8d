package control_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/tracking"
	"github.com/keyhook/keyhook/webhooks"
)

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
		NodeID:  fmt.Sprintf("node-%d", time.Now().UnixNano()),
		Brokers: brokers,
		Tuning: dispatcher.Tuning{
			CommitInterval: 100 * time.Millisecond,
			SessionTimeout: 6 * time.Second,
			Retry:          webhooks.RetryPolicy{InitialInterval: 20 * time.Millisecond, MaxInterval: 200 * time.Millisecond},
		},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
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
