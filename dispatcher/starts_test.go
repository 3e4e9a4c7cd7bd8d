package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/control"
	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
)

// A "latest" subscription delivers every record produced after it was
// created: records that arrive before the first node joins, and records
// that arrive after a node joined and left again without committing
// anything. Its start was committed at creation, so no node resets to the
// log end again and skips them.
func TestLatestSubscriptionDeliversWhatArrivedBeforeItsFirstCommit(t *testing.T) {
	startTiers(t, 2, "latest-handover", func(t *testing.T, brokers []string, topic string) {
		rdb := testutil.StartRedis(t).Client()
		sink := testutil.StartSink(t)
		var down atomic.Bool
		down.Store(true)
		sink.Status = func(*testutil.Delivery) int {
			if down.Load() {
				return 503
			}
			return 200
		}
		produceBodies(t, brokers, topic, map[int32]int{0: 5, 1: 5}, "before")
		sub := newSub("latest-handover", topic, sink.URL, subscription.OrderKey, 8)
		sub.Start = subscription.StartLatest
		resolveStart(t, brokers, sub)
		produceBodies(t, brokers, topic, map[int32]int{0: 3, 1: 2}, "after")

		// A joins while the endpoint is down and leaves, gracefully,
		// having acked nothing; more records arrive meanwhile.
		quickDrain := func(c *dispatcher.Config) { c.DrainTimeout = 300 * time.Millisecond }
		a := startNode(t, brokers, rdb, []*subscription.Subscription{sub}, quickDrain)
		waitClaimed(t, a, 2)
		a.stop(t)
		produceBodies(t, brokers, topic, map[int32]int{0: 2, 1: 3}, "later")

		down.Store(false)
		startNode(t, brokers, rdb, []*subscription.Subscription{sub}, quickDrain)
		waitBodies(t, sink, "after", 5, 30*time.Second)
		waitBodies(t, sink, "later", 5, 30*time.Second)
		if n := len(ackedBodies(sink, "before")); n != 0 {
			t.Errorf("%d records produced before the subscription was created were delivered", n)
		}
	})
}

// Partitions added to a topic after the subscription was created are read
// from their first record, whatever the subscription's start: they did
// not exist when the start was fixed.
func TestPartitionsAddedLaterAreReadFromTheirFirstRecord(t *testing.T) {
	startTiers(t, 1, "added-partitions", func(t *testing.T, brokers []string, topic string) {
		rdb := testutil.StartRedis(t).Client()
		sink := testutil.StartSink(t)
		sub := newSub("added-partitions", topic, sink.URL, subscription.OrderKey, 8)
		sub.Start = subscription.StartLatest
		resolveStart(t, brokers, sub)
		h := startNode(t, brokers, rdb, []*subscription.Subscription{sub}, func(c *dispatcher.Config) {
			c.KafkaOptions = append(c.KafkaOptions, kgo.MetadataMinAge(250*time.Millisecond), kgo.MetadataMaxAge(time.Second))
		})
		waitClaimed(t, h, 1)

		adm := testutil.Admin(t, brokers)
		resp, err := adm.CreatePartitions(context.Background(), 2, topic)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			t.Fatalf("add partitions: %v", err)
		}
		// Produced at once, before the node's next metadata refresh shows
		// it the new partitions.
		produceBodies(t, brokers, topic, map[int32]int{1: 5, 2: 5}, "added")
		waitBodies(t, sink, "added", 10, 30*time.Second)
	})
}

// When the group's commits are gone (offsets.retention expired them) but
// the tracking state survived, the partition resumes at the tracked
// watermark: neither jumping to the log end and skipping what is new, nor
// delivering the whole log again.
func TestExpiredGroupOffsetsResumeAtTheTrackedWatermark(t *testing.T) {
	startTiers(t, 1, "expired-offsets", func(t *testing.T, brokers []string, topic string) {
		rdb := testutil.StartRedis(t).Client()
		sink := testutil.StartSink(t)
		sub := newSub("expired-offsets", topic, sink.URL, subscription.OrderKey, 8)
		sub.Start = subscription.StartLatest
		resolveStart(t, brokers, sub)
		adm := testutil.Admin(t, brokers)

		a := startNode(t, brokers, rdb, []*subscription.Subscription{sub}, nil)
		waitClaimed(t, a, 1)
		produceBodies(t, brokers, topic, map[int32]int{0: 20}, "first")
		waitBodies(t, sink, "first", 20, 30*time.Second)
		testutil.WaitCommitted(t, adm, sub.GroupID(), map[int32]int64{0: 20}, 30*time.Second)
		a.stop(t)

		deleteGroup(t, adm, sub.GroupID())
		produceBodies(t, brokers, topic, map[int32]int{0: 10}, "second")
		// The group comes back with its generation restarted; offsets
		// expire only after the group was empty for offsets.retention,
		// long after the last claim went stale, which the short limit
		// stands for here.
		tracker, err := tracking.New(rdb, tracking.Config{StaleClaim: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		startNodeTracking(t, brokers, tracker, staticSubs{sub}, nil)
		waitBodies(t, sink, "second", 10, 30*time.Second)
		testutil.WaitCommitted(t, adm, sub.GroupID(), map[int32]int64{0: 30}, 30*time.Second)
		if d := sink.Duplicates(); d != 0 {
			t.Errorf("%d records delivered again after the group's offsets expired; want resumption at the watermark", d)
		}
	})
}

// A topic deleted and created again under the same name is read from its
// first record. Neither the tracking state of the old topic (acked ranges
// above a stuck record) nor a group commit above the new log end (the old
// topic's, where the broker kept it) may make the new topic's records be
// skipped.
func TestRecreatedTopicIsReadFromItsFirstRecord(t *testing.T) {
	tests := []struct {
		name string
		// stuck makes the old topic's first record fail, so the old state
		// keeps acked ranges above an unacked watermark.
		stuck bool
		// oldCommit leaves the group's commit of the old topic in place.
		oldCommit bool
	}{
		{"old acked ranges above a stuck record", true, false},
		{"old commit above the new log end", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			startTiers(t, 1, "recreated", func(t *testing.T, brokers []string, topic string) {
				rdb := testutil.StartRedis(t).Client()
				sink := testutil.StartSink(t)
				var stuck atomic.Bool
				stuck.Store(tt.stuck)
				sink.Status = func(d *testutil.Delivery) int {
					if stuck.Load() && string(d.Body) == "old-0" {
						return 503
					}
					return 200
				}
				sub := newSub("recreated", topic, sink.URL, subscription.OrderKey, 8)
				adm := testutil.Admin(t, brokers)
				quickDrain := func(c *dispatcher.Config) { c.DrainTimeout = 300 * time.Millisecond }

				a := startNode(t, brokers, rdb, []*subscription.Subscription{sub}, quickDrain)
				produceBodies(t, brokers, topic, map[int32]int{0: 40}, "old")
				waitBodies(t, sink, "old", 39, 30*time.Second)
				if !tt.stuck {
					waitBodies(t, sink, "old", 40, 30*time.Second)
					testutil.WaitCommitted(t, adm, sub.GroupID(), map[int32]int64{0: 40}, 30*time.Second)
				}
				a.stop(t)

				recreateTopic(t, brokers, topic, 1)
				stuck.Store(false)
				produceBodies(t, brokers, topic, map[int32]int{0: 30}, "new")
				if tt.oldCommit {
					offs := kadm.Offsets{}
					offs.Add(kadm.Offset{Topic: topic, Partition: 0, At: 40, LeaderEpoch: -1})
					// A new client: the old one knows the old topic's ID.
					resp, err := testutil.Admin(t, brokers).CommitOffsets(context.Background(), sub.GroupID(), offs)
					if err == nil {
						err = resp.Error()
					}
					if err != nil {
						t.Fatalf("commit the old offset: %v", err)
					}
				}
				startNode(t, brokers, rdb, []*subscription.Subscription{sub}, quickDrain)
				waitBodies(t, sink, "new", 30, 30*time.Second)
			})
		})
	}
}

// startTiers runs f against kfake, and against the real broker when the
// integration tier is on, each time on a fresh topic of its own.
func startTiers(t *testing.T, partitions int32, base string, f func(t *testing.T, brokers []string, topic string)) {
	t.Run("kfake", func(t *testing.T) {
		brokers := testutil.Kfake(t, partitions, base)
		f(t, brokers, base)
	})
	t.Run("kafka", func(t *testing.T) {
		brokers := testutil.RealKafka(t)
		topic := testutil.UniqueTopic(base)
		testutil.CreateTopics(t, brokers, partitions, topic)
		f(t, brokers, topic)
	})
}

// resolveStart fixes sub's start for its group, as the API does when it
// creates the subscription.
func resolveStart(t *testing.T, brokers []string, sub *subscription.Subscription) {
	t.Helper()
	r, err := control.NewStartResolver(testutil.Admin(t, brokers))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.ResolveStart(context.Background(), sub); err != nil {
		t.Fatalf("resolve start: %v", err)
	}
}

// produceBodies writes counts[p] records to partition p of topic, with
// values "<prefix>-<i>" (i counting over all partitions) and keys k<i>.
func produceBodies(t *testing.T, brokers []string, topic string, counts map[int32]int, prefix string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	i := 0
	for p := range int32(len(counts) + 8) {
		for range counts[p] {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "%s-%d", prefix, i)})
			i++
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// ackedBodies counts the 2xx answers per record value starting with
// prefix.
func ackedBodies(sink *testutil.Sink, prefix string) map[string]int {
	out := map[string]int{}
	for _, d := range sink.Deliveries() {
		if d.Status/100 == 2 && strings.HasPrefix(string(d.Body), prefix+"-") {
			out[string(d.Body)]++
		}
	}
	return out
}

// waitBodies waits until n distinct records of prefix were acked.
func waitBodies(t *testing.T, sink *testutil.Sink, prefix string, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if len(ackedBodies(sink, prefix)) >= n {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%d of %d %q records delivered after %v", len(ackedBodies(sink, prefix)), n, prefix, timeout)
}

// waitClaimed waits until the node owns and claimed n partitions.
func waitClaimed(t *testing.T, h *nodeHandle, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		claimed := 0
		for _, o := range h.node.Owned() {
			if o.Claimed {
				claimed++
			}
		}
		if claimed >= n {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("node did not claim %d partitions within 30s: %+v", n, h.node.Owned())
}

// deleteGroup removes the group and its commits, as offsets.retention
// does to a group left empty for too long.
func deleteGroup(t *testing.T, adm *kadm.Client, group string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := adm.DeleteGroup(context.Background(), group)
		if err == nil {
			err = resp.Err
		}
		if err == nil {
			return
		}
		// The last member's leave may not have reached the coordinator.
		if !errors.Is(err, kerr.NonEmptyGroup) || time.Now().After(deadline) {
			t.Fatalf("delete group %s: %v", group, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// recreateTopic deletes topic and creates it again under the same name;
// a real broker may take a moment to finish the deletion.
func recreateTopic(t *testing.T, brokers []string, topic string, partitions int32) {
	t.Helper()
	adm := testutil.Admin(t, brokers)
	ctx := context.Background()
	if _, err := adm.DeleteTopic(ctx, topic); err != nil {
		t.Fatalf("delete topic: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := adm.CreateTopic(ctx, partitions, 1, nil, topic)
		if err == nil {
			err = resp.Err
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("create topic again: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The new topic's partitions need leaders before records can go in.
	testutil.CreateTopics(t, brokers, partitions, topic)
}
