package control_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/control"
	"github.com/keyhook/keyhook/deadletter"
	"github.com/keyhook/keyhook/internal/keyspace"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
)

// A cleanup whose subscription still exists is dropped, state kept; one
// whose group still has a member waits for it to leave; then the group,
// the tracking state and the queued redrives are gone.
func TestCleanerWaitsForTheGroupToEmptyThenRemovesEverything(t *testing.T) {
	topic := testutil.UniqueTopic("cleanup")
	testutil.KafkaTiers(t, 1, []string{topic}, func(t *testing.T, brokers []string) {
		ctx := context.Background()
		rdb := testutil.StartRedis(t).Client()
		store, err := subscription.New(rdb, subscription.Config{})
		if err != nil {
			t.Fatal(err)
		}
		tracker, err := tracking.New(rdb, tracking.Config{})
		if err != nil {
			t.Fatal(err)
		}
		redrives, err := deadletter.NewQueue(rdb, deadletter.QueueConfig{})
		if err != nil {
			t.Fatal(err)
		}
		sub := &subscription.Subscription{Name: "c", Topics: []string{topic}, Endpoint: subscription.Endpoint{URL: "http://127.0.0.1:1/hook"}}
		if err := store.Create(ctx, sub); err != nil {
			t.Fatal(err)
		}
		if _, err := tracker.ClaimRanges(ctx, tracking.PartitionKey{Subscription: sub.ID, Topic: topic, Partition: 0}, "node-a", 1, "", nil); err != nil {
			t.Fatal(err)
		}
		if err := redrives.Push(ctx, sub.ID, []deadletter.Redrive{{DeliveryID: "dlv_1", Topic: topic, Offset: 3}}); err != nil {
			t.Fatal(err)
		}
		adm := testutil.Admin(t, brokers)
		c, err := control.NewCleaner(rdb, adm, store, []control.StateDeleter{tracker, redrives}, control.CleanupConfig{
			Delay: time.Millisecond, Interval: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(runCtx) }()
		defer func() { stop(); <-done }()
		schedule := keyspace.Keyspace{}.Cleanups()
		keys := func() int {
			n := 0
			for _, p := range []string{keyspace.Keyspace{}.PartitionPattern(sub.ID), "keyhook:redrive:*"} {
				ks, _ := rdb.Keys(ctx, p).Result()
				n += len(ks)
			}
			return n
		}
		waitFor := func(what string, cond func() bool) {
			t.Helper()
			deadline := time.Now().Add(20 * time.Second)
			for !cond() {
				if time.Now().After(deadline) {
					t.Fatalf("%s: not within 20s", what)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}

		// The delete did not happen: the cleanup is dropped.
		if err := c.Schedule(ctx, sub.ID); err != nil {
			t.Fatal(err)
		}
		waitFor("the cleanup of a subscription that exists dropped", func() bool { return rdb.ZCard(ctx, schedule).Val() == 0 })
		if n := keys(); n != 3 {
			t.Fatalf("after a dropped cleanup %d state keys are left, want the 3 there were", n)
		}

		// Deleted, but a node is still in the group.
		member, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(sub.GroupID()), kgo.ConsumeTopics(topic))
		if err != nil {
			t.Fatal(err)
		}
		waitFor("the member to join", func() bool {
			gs, err := adm.DescribeGroups(ctx, sub.GroupID())
			return err == nil && len(gs[sub.GroupID()].Members) == 1
		})
		if err := store.DeleteVersion(ctx, sub.ID, subscription.AnyVersion); err != nil {
			t.Fatal(err)
		}
		if err := c.Schedule(ctx, sub.ID); err != nil {
			t.Fatal(err)
		}
		first := rdb.ZScore(ctx, schedule, sub.ID).Val()
		waitFor("a try while the group has a member, rescheduled", func() bool { return rdb.ZScore(ctx, schedule, sub.ID).Val() > first })
		if n := keys(); n != 3 {
			t.Fatalf("with a member still in the group %d state keys are left, want all 3 kept", n)
		}

		member.Close()
		waitFor("the cleanup to finish", func() bool { return rdb.ZCard(ctx, schedule).Val() == 0 })
		if n := keys(); n != 0 {
			t.Errorf("after the cleanup %d state keys are left, want none", n)
		}
		ls, err := adm.ListGroups(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := ls[sub.GroupID()]; ok {
			t.Errorf("group %s still listed after the cleanup", sub.GroupID())
		}
	})
}
