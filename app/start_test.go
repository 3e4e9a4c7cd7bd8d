package app_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/app"
	"github.com/keyhook/keyhook/auth"
	"github.com/keyhook/keyhook/internal/testutil"
)

// The API a node serves fixes a "latest" subscription's start through
// the Kafka admin client it was built with: once the create has answered,
// the subscription's group has committed the log end of every partition.
func TestAPICreateCommitsTheStartOfALatestSubscription(t *testing.T) {
	const topic = "orders"
	brokers := testutil.Kfake(t, 2, topic)
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	for i := range 5 {
		rec := &kgo.Record{Topic: topic, Partition: int32(i % 2), Value: []byte("before")}
		if err := producer.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	token := auth.Generate()
	a, err := app.Build(context.Background(), app.Config{
		NodeID: "node-a", Brokers: brokers, HTTPAddr: "127.0.0.1:0", BootstrapToken: token, Roles: app.RoleAPI,
		AllowPrivateEndpoints: true, Logger: slog.New(slog.DiscardHandler),
	}, app.Deps{Redis: testutil.StartRedis(t).Client()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()

	req, _ := http.NewRequest(http.MethodPost, "http://"+a.APIAddr()+"/v1/subscriptions", strings.NewReader(
		`{"name":"app","topics":["orders"],"endpoint":{"url":"http://127.0.0.1:9/hook"},"start":"latest","dead_letter_topic":"none"}`))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
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
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	offs, err := kadm.NewClient(cl).FetchOffsets(context.Background(), "keyhook-"+sub.ID)
	if err != nil {
		t.Fatal(err)
	}
	got := map[int32]int64{}
	offs.Each(func(o kadm.OffsetResponse) { got[o.Partition] = o.At })
	if diff := cmp.Diff(map[int32]int64{0: 3, 1: 2}, got); diff != "" {
		t.Errorf("group commits after the create (-want +got):\n%s", diff)
	}
}
