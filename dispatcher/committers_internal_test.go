package dispatcher

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keyhook/keyhook/internal/testutil"
)

// requestCounter counts the requests a client writes, by key.
type requestCounter struct{ metadata, commits atomic.Int64 }

func (c *requestCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _ time.Duration, _ time.Duration, _ error) {
	switch key {
	case kmsg.Metadata.Int16():
		c.metadata.Add(1)
	case kmsg.OffsetCommit.Int16():
		c.commits.Add(1)
	}
}

// A cursor's commit names its topics by the IDs its assignment read: one
// OffsetCommit and no Metadata request per commit (kadm's CommitOffsets
// asked for the IDs each time, half a node's requests at a thousand
// cursors); an ID that is not the topic's (the topic was deleted and
// created again) is refused, not committed to the new topic; an unknown ID
// falls back to looking them up.
func TestCursorCommitsNameTopicsByTheAssignmentsIDs(t *testing.T) {
	testutil.KafkaTiers(t, 2, []string{"ids"}, func(t *testing.T, brokers []string) {
		topic := "ids"
		if t.Name() != "TestCursorCommitsNameTopicsByTheAssignmentsIDs/kfake" {
			topic = testutil.UniqueTopic("ids")
			testutil.CreateTopics(t, brokers, 2, topic)
		}
		ctx := context.Background()
		adm := testutil.Admin(t, brokers)
		md, err := adm.Metadata(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		id := md.Topics[topic].ID
		if id == (kadm.TopicID{}) {
			t.Fatalf("the broker gave %s no topic ID", topic)
		}
		var count requestCounter
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.WithHooks(&count))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		group := topic + "-cursor"
		committed := func() map[int32]int64 {
			t.Helper()
			got, err := adm.FetchOffsets(ctx, group)
			if err != nil {
				t.Fatal(err)
			}
			out := map[int32]int64{}
			got.Each(func(o kadm.OffsetResponse) { out[o.Partition] = o.At })
			return out
		}
		// The client's first request reads metadata whatever it sends.
		if err := cl.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		meta0 := count.metadata.Load()

		res, err := commitOffsets(ctx, cl, group, []commitOffset{
			{tp: topicPartition{topic, 0}, at: 5, topicID: id},
			{tp: topicPartition{topic, 1}, at: 7, topicID: id},
		})
		if err != nil {
			t.Fatal(err)
		}
		for tp, err := range res {
			if err != nil {
				t.Errorf("%s/%d: %v", tp.topic, tp.partition, err)
			}
		}
		if len(res) != 2 {
			t.Errorf("%d partitions answered, want 2: %v", len(res), res)
		}
		if got := committed(); got[0] != 5 || got[1] != 7 {
			t.Errorf("committed %v, want partition 0 at 5 and 1 at 7", got)
		}
		if n := count.metadata.Load() - meta0; n != 0 {
			t.Errorf("the commit sent %d Metadata requests, want none", n)
		}

		// Brokers name the topic by its ID from OffsetCommit v10 on (Kafka
		// 4.1 answers v9 at most, and takes the name).
		if byID, err := offsetCommitByID(ctx, adm); err != nil {
			t.Fatal(err)
		} else if byID {
			stale := id
			stale[0] ^= 0xff
			res, err = commitOffsets(ctx, cl, group, []commitOffset{{tp: topicPartition{topic, 0}, at: 9, topicID: stale}})
			if err == nil && res[topicPartition{topic, 0}] == nil {
				t.Errorf("a commit under another topic ID was accepted: %v", res)
			}
			if got := committed(); got[0] != 5 {
				t.Errorf("a commit under another topic ID moved partition 0 to %d, want it at 5", got[0])
			}
		} else {
			t.Log("the broker takes OffsetCommit by name only: the stale-ID case is not checked here")
		}

		res, err = commitOffsets(ctx, cl, group, []commitOffset{{tp: topicPartition{topic, 1}, at: 11}})
		if err != nil || res[topicPartition{topic, 1}] != nil {
			t.Fatalf("a commit without the ID: %v, %v", err, res)
		}
		if got := committed(); got[1] != 11 {
			t.Errorf("a commit without the ID left partition 1 at %d, want 11", got[1])
		}
		if n := count.commits.Load(); n < 2 {
			t.Errorf("%d OffsetCommit requests, want one per commit", n)
		}
	})
}

// offsetCommitByID reports whether the broker takes OffsetCommit v10, the
// first to name topics by ID.
func offsetCommitByID(ctx context.Context, adm *kadm.Client) (bool, error) {
	vs, err := adm.ApiVersions(ctx)
	if err != nil {
		return false, err
	}
	for _, v := range vs {
		if v.Err != nil {
			continue
		}
		brokerMax, ok := v.KeyMaxVersion(kmsg.OffsetCommit.Int16())
		ours := kmsg.NewOffsetCommitRequest()
		return ok && min(brokerMax, ours.MaxVersion()) >= 10, nil
	}
	return false, errors.New("no broker answered ApiVersions")
}
