package control_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/control"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
)

// A "latest" subscription gets its start fixed at creation: the group
// commits the log end of every partition before any node reads it, so no
// later reset can move it. An "earliest" one needs no commit, and a topic
// that does not exist yet has nothing to fix.
func TestResolveStartCommitsTheLogEndsOfALatestSubscription(t *testing.T) {
	testutil.KafkaTiers(t, 3, []string{"starts"}, func(t *testing.T, brokers []string) {
		topic := "starts"
		if t.Name() != "TestResolveStartCommitsTheLogEndsOfALatestSubscription/kfake" {
			topic = testutil.UniqueTopic("starts")
			testutil.CreateTopics(t, brokers, 3, topic)
		}
		adm := testutil.Admin(t, brokers)
		produceTo(t, brokers, topic, map[int32]int{0: 4, 1: 0, 2: 7})
		resolver, err := control.NewStartResolver(adm)
		if err != nil {
			t.Fatal(err)
		}
		missing := testutil.UniqueTopic("missing")
		tests := []struct {
			name   string
			start  subscription.Start
			topics []string
			want   map[int32]int64
		}{
			{"latest commits every log end", subscription.StartLatest, []string{topic}, map[int32]int64{0: 4, 1: 0, 2: 7}},
			{"earliest commits nothing", subscription.StartEarliest, []string{topic}, map[int32]int64{}},
			{"a missing topic is skipped", subscription.StartLatest, []string{topic, missing}, map[int32]int64{0: 4, 1: 0, 2: 7}},
		}
		for i, tt := range tests {
			sub := &subscription.Subscription{ID: fmt.Sprintf("sub_start%d%d", i, time.Now().UnixNano()), Topics: tt.topics, Start: tt.start}
			if err := resolver.ResolveStart(context.Background(), sub); err != nil {
				t.Fatalf("%s: ResolveStart: %v", tt.name, err)
			}
			got := map[int32]int64{}
			offs, err := adm.FetchOffsets(context.Background(), sub.GroupID())
			if errors.Is(err, kerr.GroupIDNotFound) {
				err = nil // kfake: a group nobody committed for does not exist
			}
			if err != nil {
				t.Fatal(err)
			}
			offs.Each(func(o kadm.OffsetResponse) {
				if o.Err == nil && o.Topic == topic {
					got[o.Partition] = o.At
				}
			})
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("%s: commits (-want +got):\n%s", tt.name, diff)
			}
		}
	})
}

// When Kafka does not answer, nothing is committed and the error says so;
// the caller then stores nothing.
func TestResolveStartFailsWhenKafkaDoesNotAnswer(t *testing.T) {
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"), kgo.RetryTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	resolver, err := control.NewStartResolver(kadm.NewClient(cl))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	sub := &subscription.Subscription{ID: "sub_down", Topics: []string{"orders"}, Start: subscription.StartLatest}
	if err := resolver.ResolveStart(ctx, sub); err == nil {
		t.Fatal("ResolveStart succeeded without a broker")
	}
}

// produceTo writes counts[p] records to each partition p of topic.
func produceTo(t *testing.T, brokers []string, topic string, counts map[int32]int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for p, n := range counts {
		for i := range n {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "%d-%d", p, i)})
		}
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}
