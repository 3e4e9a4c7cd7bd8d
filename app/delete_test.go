package app_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/internal/keyspace"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
)

// TestDeleteRemovesTrackingGroupAndMetrics deletes a subscription that
// delivered: within seconds its tracking keys, its consumer group and its
// metric series are gone, on kfake and on a real broker.
func TestDeleteRemovesTrackingGroupAndMetrics(t *testing.T) {
	for _, tt := range []struct {
		name    string
		brokers func(t *testing.T, topic string) []string
	}{
		{"kfake", func(t *testing.T, topic string) []string { return testutil.Kfake(t, 2, topic) }},
		{"real broker", func(t *testing.T, topic string) []string {
			b := testutil.RealKafka(t)
			testutil.CreateTopics(t, b, 2, topic)
			return b
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			topic := "delete-" + strings.ReplaceAll(tt.name, " ", "-") + "-" + time.Now().Format("150405.000000")
			brokers := tt.brokers(t, topic)
			n := startNode(t, brokers)
			sink := testutil.StartSink(t)
			id := n.subscribe(t, topic, sink.URL)
			for i := range 10 {
				produce(t, brokers, topic, &kgo.Record{Key: []byte{byte('a' + i)}, Value: []byte("v")})
			}
			sink.WaitAcked(t, 10, 30*time.Second)

			adm, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
			if err != nil {
				t.Fatal(err)
			}
			defer adm.Close()
			group := (&subscription.Subscription{ID: id}).GroupID()
			groupExists := func() bool {
				ls, err := kadm.NewClient(adm).ListGroups(context.Background())
				if err != nil {
					t.Fatalf("list groups: %v", err)
				}
				_, ok := ls[group]
				return ok
			}
			trackingKeys := func() []string {
				keys, err := n.rdb.Keys(context.Background(), keyspace.Keyspace{}.PartitionPattern(id)).Result()
				if err != nil {
					t.Fatalf("keys: %v", err)
				}
				return keys
			}
			eventually(t, 10*time.Second, "state to exist before the delete", func() bool {
				return len(trackingKeys()) > 0 && groupExists() && strings.Contains(n.scrape(t), id)
			})

			if code := n.call(t, http.MethodDelete, "/v1/subscriptions/"+id, "", nil); code != http.StatusNoContent {
				t.Fatalf("delete = %d", code)
			}
			deleted := time.Now()
			deadline := deleted.Add(20 * time.Second)
			for {
				keys, hasGroup, series := trackingKeys(), groupExists(), strings.Count(n.scrape(t), id)
				if len(keys) == 0 && !hasGroup && series == 0 {
					t.Logf("tracking keys, consumer group and metric series gone %v after DELETE", time.Since(deleted).Round(10*time.Millisecond))
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("20s after DELETE: tracking keys %q, consumer group present %v, %d metric series; want none", keys, hasGroup, series)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}
