package configlog_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/auth"
	"github.com/keyhook/keyhook/configlog"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
)

// world is a config log on kfake and the two stores that record in it,
// over a real Redis.
type world struct {
	rdb     *redis.Client
	brokers []string
	log     *configlog.Log
	subs    *subscription.Store
	tokens  *auth.Store
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{rdb: testutil.StartRedis(t).Client(), brokers: testutil.Kfake(t, 1)}
	w.log = newLog(t, w.brokers)
	var err error
	if w.subs, err = subscription.New(w.rdb, subscription.Config{Log: w.log}); err != nil {
		t.Fatal(err)
	}
	if w.tokens, err = auth.New(w.rdb, auth.Config{Log: w.log}); err != nil {
		t.Fatal(err)
	}
	return w
}

func newLog(t *testing.T, brokers []string) *configlog.Log {
	t.Helper()
	l, err := configlog.New([]kgo.Opt{kgo.SeedBrokers(brokers...)}, configlog.Config{
		Interval: 20 * time.Millisecond, WriteTimeout: 2 * time.Second, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	if err := l.EnsureTopic(context.Background()); err != nil {
		t.Fatal(err)
	}
	return l
}

// restore runs a restorer (a Log of its own, as on another node) until the
// test ends.
func (w *world) restore(t *testing.T) {
	t.Helper()
	l := newLog(t, w.brokers)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx, w.subs, w.tokens) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func (w *world) create(t *testing.T, name string) *subscription.Subscription {
	t.Helper()
	sub := &subscription.Subscription{Name: name, Topics: []string{"orders"}, Endpoint: subscription.Endpoint{URL: "https://example.com/" + name}}
	if err := w.subs.Create(context.Background(), sub); err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	return sub
}

func waitFor(t *testing.T, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// versions lists the stored subscriptions by id with their versions.
func (w *world) versions(t *testing.T) map[string]int64 {
	t.Helper()
	list, err := w.subs.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]int64, len(list))
	for _, s := range list {
		out[s.ID] = s.Version
	}
	return out
}

func TestRunRebuildsAFlushedRedisWithoutDeletedOrRevokedEntries(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	a, b := w.create(t, "a"), w.create(t, "b")
	if err := w.subs.Delete(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := w.subs.Update(ctx, a.ID, subscription.AnyVersion, func(s *subscription.Subscription) error { s.MaxInFlight = 7; return nil }); err != nil {
		t.Fatal(err)
	}
	kept, _, err := w.tokens.Create(ctx, "kept", []auth.Scope{auth.ScopeAdmin})
	if err != nil {
		t.Fatal(err)
	}
	revoked, _, err := w.tokens.Create(ctx, "revoked", []auth.Scope{auth.ScopeRead})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.tokens.Revoke(ctx, "revoked"); err != nil {
		t.Fatal(err)
	}

	if err := w.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	w.restore(t)
	took := waitFor(t, "subscription a and token kept are back", func() bool {
		_, err := w.tokens.Authenticate(ctx, kept)
		return w.versions(t)[a.ID] == 2 && err == nil
	})
	t.Logf("back after %v", took)
	if got := w.versions(t); len(got) != 1 {
		t.Errorf("stored subscriptions %v; want only %s (b was deleted)", got, a.ID)
	}
	if _, err := w.tokens.Authenticate(ctx, revoked); !errors.Is(err, auth.ErrInvalidToken) {
		t.Errorf("revoked token after the rebuild: %v, want ErrInvalidToken", err)
	}
	list, err := w.tokens.List(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "kept" {
		t.Errorf("tokens after the rebuild: %+v, %v; want only kept", list, err)
	}
}

func TestRunLetsTheLatestStateWinOverARolledBackRedis(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	a, b := w.create(t, "a"), w.create(t, "b")
	old, _, err := w.tokens.Create(ctx, "old", []auth.Scope{auth.ScopeAdmin})
	if err != nil {
		t.Fatal(err)
	}
	snapshot := dump(t, w.rdb)

	if err := w.subs.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := w.subs.Update(ctx, b.ID, subscription.AnyVersion, func(s *subscription.Subscription) error { s.MaxInFlight = 9; return nil }); err != nil {
		t.Fatal(err)
	}
	c := w.create(t, "c")
	if err := w.tokens.Revoke(ctx, "old"); err != nil {
		t.Fatal(err)
	}
	fresh, _, err := w.tokens.Create(ctx, "fresh", []auth.Scope{auth.ScopeRead})
	if err != nil {
		t.Fatal(err)
	}

	rollBack(t, w.rdb, snapshot)
	if got := w.versions(t); got[a.ID] != 1 || got[b.ID] != 1 || len(got) != 2 {
		t.Fatalf("the rollback left %v", got)
	}
	w.restore(t)
	waitFor(t, "the latest state wins", func() bool {
		got := w.versions(t)
		_, errOld := w.tokens.Authenticate(ctx, old)
		_, errFresh := w.tokens.Authenticate(ctx, fresh)
		return len(got) == 2 && got[b.ID] == 2 && got[c.ID] == 1 && errors.Is(errOld, auth.ErrInvalidToken) && errFresh == nil
	})
}

func TestRunAdoptsWhatRedisHoldsThatTheLogNeverSaw(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	// Written before the config log existed: straight to Redis.
	bare, err := subscription.New(w.rdb, subscription.Config{})
	if err != nil {
		t.Fatal(err)
	}
	legacy := &subscription.Subscription{Name: "legacy", Topics: []string{"orders"}, Endpoint: subscription.Endpoint{URL: "https://example.com/x"}}
	if err := bare.Create(ctx, legacy); err != nil {
		t.Fatal(err)
	}
	w.restore(t)
	waitFor(t, "the legacy subscription is in the log", func() bool { return logHas(t, w.brokers, "subscription/"+legacy.ID) })
	if err := w.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the legacy subscription is back", func() bool { return w.versions(t)[legacy.ID] == 1 })
}

func TestAChangeKafkaRefusesFailsAndLeavesRedisUnchanged(t *testing.T) {
	ctx := context.Background()
	rdb := testutil.StartRedis(t).Client()
	l, err := configlog.New([]kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, configlog.Config{WriteTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	subs, err := subscription.New(rdb, subscription.Config{Log: l})
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.New(rdb, auth.Config{Log: l})
	if err != nil {
		t.Fatal(err)
	}
	sub := &subscription.Subscription{Name: "x", Topics: []string{"orders"}, Endpoint: subscription.Endpoint{URL: "https://example.com/x"}}
	if err := subs.Create(ctx, sub); !errors.Is(err, subscription.ErrUnavailable) {
		t.Errorf("Create with Kafka down: %v, want ErrUnavailable", err)
	}
	if _, _, err := tokens.Create(ctx, "t", []auth.Scope{auth.ScopeAdmin}); !errors.Is(err, auth.ErrUnavailable) {
		t.Errorf("token Create with Kafka down: %v, want ErrUnavailable", err)
	}
	if n, err := rdb.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Errorf("Redis holds %d keys (%v) after refused changes; want none", n, err)
	}
}

func TestRunAppendsTheWinnerAgainAfterAStaleRecord(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	a := w.create(t, "a")
	if err := w.subs.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	// A stale record after the delete (an adoption that raced it): the
	// topic's last record for a must become the delete again, or
	// compaction would keep the stale one.
	if err := w.log.Restate(ctx, subscription.LogKind, a.ID, 1, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	w.restore(t)
	waitFor(t, "the delete is the last record again", func() bool {
		r, ok := lastRecord(t, w.brokers, "subscription/"+a.ID)
		return ok && r.Value == nil
	})
	if got := w.versions(t); len(got) != 0 {
		t.Errorf("stored %v, want nothing", got)
	}
}

func TestEnsureTopicCreatesACompactedTopicAndRefusesAnUnfitOne(t *testing.T) {
	ctx := context.Background()
	brokers := testutil.Kfake(t, 1)
	newLog(t, brokers)
	adm := kadm.NewClient(newClient(t, brokers))
	rc, err := adm.DescribeTopicConfigs(ctx, configlog.DefaultTopic)
	if err != nil {
		t.Fatal(err)
	}
	cfgs, err := rc.On(configlog.DefaultTopic, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, c := range cfgs.Configs {
		got[c.Key] = c.MaybeValue()
	}
	if got["cleanup.policy"] != "compact" || got["delete.retention.ms"] != "604800000" {
		t.Errorf("topic configs cleanup.policy=%q delete.retention.ms=%q; want compact and 7 days", got["cleanup.policy"], got["delete.retention.ms"])
	}

	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("delete")}, "plain"); err != nil {
		t.Fatal(err)
	}
	l, err := configlog.New([]kgo.Opt{kgo.SeedBrokers(brokers...)}, configlog.Config{Topic: "plain"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.EnsureTopic(ctx); !errors.Is(err, configlog.ErrTopicUnfit) {
		t.Errorf("EnsureTopic over a deleting topic: %v, want ErrTopicUnfit", err)
	}
	if _, err := adm.CreateTopic(ctx, 3, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, "wide"); err != nil {
		t.Fatal(err)
	}
	wide, err := configlog.New([]kgo.Opt{kgo.SeedBrokers(brokers...)}, configlog.Config{Topic: "wide"})
	if err != nil {
		t.Fatal(err)
	}
	defer wide.Close()
	if err := wide.EnsureTopic(ctx); !errors.Is(err, configlog.ErrTopicUnfit) {
		t.Errorf("EnsureTopic over a topic of 3 partitions: %v, want ErrTopicUnfit", err)
	}
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

// lastRecord reads the config topic and returns the last record of key.
func lastRecord(t *testing.T, brokers []string, key string) (*kgo.Record, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	adm := kadm.NewClient(newClient(t, brokers))
	ends, err := adm.ListEndOffsets(ctx, configlog.DefaultTopic)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(configlog.DefaultTopic, 0)
	cl := newClient(t, brokers, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{configlog.DefaultTopic: {0: kgo.NewOffset().AtStart()}}))
	var last *kgo.Record
	for next := int64(0); next < end.Offset; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read the config topic: %v", ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			next = r.Offset + 1
			if string(r.Key) == key {
				last = r
			}
		})
	}
	return last, last != nil
}

func logHas(t *testing.T, brokers []string, key string) bool {
	_, ok := lastRecord(t, brokers, key)
	return ok
}

// dump saves every key of Redis (DUMP), as a snapshot would.
func dump(t *testing.T, rdb *redis.Client) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		v, err := rdb.Dump(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		out[k] = v
	}
	return out
}

// rollBack makes Redis hold exactly snapshot again.
func rollBack(t *testing.T, rdb *redis.Client, snapshot map[string]string) {
	t.Helper()
	ctx := context.Background()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for k, v := range snapshot {
		if err := rdb.RestoreReplace(ctx, k, 0, v).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAChangeRacingADeleteLeavesTheLogDeleted(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	a := w.create(t, "a")
	// Another node, whose log this node's has not read yet.
	other, err := subscription.New(w.rdb, subscription.Config{Log: newLog(t, w.brokers)})
	if err != nil {
		t.Fatal(err)
	}
	// The delete lands between the change's read and its write: the
	// change's record follows the delete's in the log.
	_, err = w.subs.Update(ctx, a.ID, subscription.AnyVersion, func(s *subscription.Subscription) error {
		if err := other.Delete(ctx, a.ID); err != nil {
			t.Errorf("delete: %v", err)
		}
		s.MaxInFlight = 5
		return nil
	})
	if !errors.Is(err, subscription.ErrNotFound) {
		t.Fatalf("Update racing a delete: %v, want ErrNotFound", err)
	}
	if r, ok := lastRecord(t, w.brokers, "subscription/"+a.ID); !ok || r.Value != nil {
		t.Errorf("the log's last record of the subscription is %q (found %v); want the delete", lastValue(r), ok)
	}
	b := w.create(t, "b")
	if err := w.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	w.restore(t)
	waitFor(t, "b is restored after a flush", func() bool { return w.versions(t)[b.ID] == 1 })
	if _, ok := w.versions(t)[a.ID]; ok {
		t.Errorf("the deleted subscription came back")
	}
}

func lastValue(r *kgo.Record) string {
	if r == nil {
		return ""
	}
	return string(r.Value)
}

func TestPutRefusesAVersionTheLogHasPassed(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	const kind = "thing"
	if err := w.log.Delete(ctx, kind, "x", 3); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		version int64
		stale   bool
	}{{2, true}, {3, true}, {4, false}, {4, false}, {3, true}} {
		err := w.log.Put(ctx, kind, "x", tc.version, []byte("{}"))
		if got := errors.Is(err, configlog.ErrStale); got != tc.stale || (!tc.stale && err != nil) {
			t.Errorf("Put at version %d: %v; want stale %t", tc.version, err, tc.stale)
		}
	}
	// Restate writes what Redis holds after a lost race, whatever the log
	// looks like.
	if err := w.log.Restate(ctx, kind, "x", 3, []byte("{}")); err != nil {
		t.Errorf("Restate: %v", err)
	}
}

func TestAChangeReadFromARolledBackRedisIsRefused(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	a := w.create(t, "a")
	snapshot := dump(t, w.rdb)
	if err := w.subs.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	rollBack(t, w.rdb, snapshot)
	// Before any restorer ran, the rolled-back Redis shows a at version 1:
	// a change of it must not bring it back.
	_, err := w.subs.Update(ctx, a.ID, subscription.AnyVersion, func(s *subscription.Subscription) error { s.MaxInFlight = 3; return nil })
	if !errors.Is(err, subscription.ErrVersionMismatch) {
		t.Fatalf("Update of a deleted subscription in a rolled-back Redis: %v, want ErrVersionMismatch", err)
	}
	w.restore(t)
	waitFor(t, "the rollback is undone", func() bool { return len(w.versions(t)) == 0 })
	if r, ok := lastRecord(t, w.brokers, "subscription/"+a.ID); !ok || r.Value != nil {
		t.Errorf("the log's last record of the subscription is %q (found %v); want the delete", lastValue(r), ok)
	}
}

func TestRunLeavesAnUnchangedSetUnreadBetweenItsFullRounds(t *testing.T) {
	w := newWorld(t)
	w.create(t, "a")
	w.create(t, "b")
	cmds := testutil.CountCommands(w.rdb)
	w.restore(t)
	const version, set = "get keyhook:{keyhook:subscriptions}:version", "hgetall keyhook:subscriptions"
	// Running: it reads the set's version each round (20 ms).
	reads := 0
	waitFor(t, "a few rounds ran", func() bool { reads += cmds.Take()[version]; return reads >= 5 })
	time.Sleep(300 * time.Millisecond) // 15 rounds; a full round comes every 30
	got := cmds.Take()
	if got[version] < 5 {
		t.Fatalf("%d reads of the version in 300ms of 20ms rounds; want one a round", got[version])
	}
	if got[set] > 1 {
		t.Errorf("%d snapshots of an unchanged set in %d rounds; want at most 1 (a full round)", got[set], got[version])
	}
}

func TestRunRestoresASubscriptionRemovedBehindTheStoresBack(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	a, b := w.create(t, "a"), w.create(t, "b")
	cmds := testutil.CountCommands(w.rdb)
	w.restore(t)
	reads := 0
	waitFor(t, "rounds found the set in step", func() bool {
		reads += cmds.Take()["get keyhook:{keyhook:subscriptions}:version"]
		return reads >= 5
	})
	// Neither the version nor the log moves: only a full round sees it.
	if err := w.rdb.HDel(ctx, "keyhook:subscriptions", a.ID).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a is back", func() bool { got := w.versions(t); return got[a.ID] == 1 && got[b.ID] == 1 })
}
