package control_test

import (
	"context"
	"testing"

	"github.com/keyhook/keyhook/control"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
)

// A subscription no node has consumed yet has no consumer group, and one
// may name a topic that does not exist (yet): its status and a seek answer
// as for any other, rather than fail on the broker's "no such group" or
// "no such topic".
func TestStatusAndSeekOfASubscriptionNoNodeHasConsumed(t *testing.T) {
	testutil.KafkaTiers(t, 2, []string{"fresh"}, func(t *testing.T, brokers []string) {
		ctx := context.Background()
		topic := "fresh"
		if t.Name() != "TestStatusAndSeekOfASubscriptionNoNodeHasConsumed/kfake" {
			topic = testutil.UniqueTopic("fresh")
			testutil.CreateTopics(t, brokers, 2, topic)
		}
		rdb := testutil.StartRedis(t).Client()
		store, err := subscription.New(rdb, subscription.Config{})
		if err != nil {
			t.Fatal(err)
		}
		tracker, err := tracking.New(rdb, tracking.Config{})
		if err != nil {
			t.Fatal(err)
		}
		admin, err := control.NewSeeker(testutil.Admin(t, brokers), store, tracker, control.SeekConfig{})
		if err != nil {
			t.Fatal(err)
		}
		status := control.NewStatusReader(testutil.Admin(t, brokers), tracker)

		for _, topics := range [][]string{{topic}, {testutil.UniqueTopic("missing")}, {topic, testutil.UniqueTopic("missing")}} {
			sub := &subscription.Subscription{Name: "fresh", Topics: topics, Endpoint: subscription.Endpoint{URL: "http://127.0.0.1:9/"}}
			if err := store.Create(ctx, sub); err != nil {
				t.Fatal(err)
			}
			st, err := status.Status(ctx, sub)
			if err != nil {
				t.Fatalf("topics %v: Status = %v, want the partitions with nothing committed", topics, err)
			}
			for _, p := range st.Partitions {
				if p.Committed != -1 {
					t.Errorf("topics %v: partition %s/%d committed %d, want -1", topics, p.Topic, p.Partition, p.Committed)
				}
			}
			if _, err := admin.Seek(ctx, sub, subscription.SeekRequest{To: subscription.SeekLatest}); err != nil {
				t.Errorf("topics %v: Seek latest = %v, want it done", topics, err)
			}
		}
	})
}
