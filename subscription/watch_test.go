package subscription

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/redis/go-redis/v9"
)

// noResync is a resync interval longer than any test, so a test using it
// proves that the change feed alone carried a change.
const noResync = time.Hour

// watchIDs runs store.Watch until the test ends and returns a channel of
// the id sets it reports, one per fn call. fn blocks until the test reads,
// which also checks that Watch never calls fn concurrently (it would race
// on seen).
func watchIDs(t *testing.T, store *Store, resync time.Duration) <-chan []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan []string)
	done := make(chan error, 1)
	var seen int
	go func() {
		done <- store.Watch(ctx, resync, func(subs []*Subscription) {
			seen++
			ids := make([]string, 0, len(subs))
			for _, s := range subs {
				ids = append(ids, s.ID)
			}
			select {
			case ch <- ids:
			case <-ctx.Done():
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Watch returned %v after its context ended, want nil", err)
			}
		case <-time.After(2 * time.Second):
			t.Errorf("Watch still running 2s after its context ended")
		}
	})
	return ch
}

// waitForIDs reads reported sets until one equals want, failing after
// within has passed.
func waitForIDs(t *testing.T, ch <-chan []string, want []string, within time.Duration) {
	t.Helper()
	timeout := time.After(within)
	var last []string
	for {
		select {
		case got := <-ch:
			if cmp.Equal(want, got) {
				return
			}
			last = got
		case <-timeout:
			t.Fatalf("Watch did not report %v within %v; last report %v", want, within, last)
		}
	}
}

func createSub(t *testing.T, store *Store, name string) *Subscription {
	t.Helper()
	sub := &Subscription{Name: name, Topics: []string{"orders"}, Endpoint: Endpoint{URL: "https://h.example"}}
	if err := store.Create(context.Background(), sub); err != nil {
		t.Fatalf("Create %s: %v", name, err)
	}
	return sub
}

func TestWatchReportsCurrentSetAtStart(t *testing.T) {
	r := testutil.StartRedis(t)
	store := newStore(t, r.Client(), Config{})
	a := createSub(t, store, "a")

	ids := watchIDs(t, store, noResync)
	waitForIDs(t, ids, []string{a.ID}, 2*time.Second)
}

func TestWatchSeesChangesFromAnotherStoreThroughTheFeed(t *testing.T) {
	r := testutil.StartRedis(t)
	watcher, writer := newStore(t, r.Client(), Config{}), newStore(t, r.Client(), Config{})

	ids := watchIDs(t, watcher, noResync)
	waitForIDs(t, ids, []string{}, 2*time.Second)

	a := createSub(t, writer, "a")
	waitForIDs(t, ids, []string{a.ID}, 2*time.Second)

	if err := writer.Delete(context.Background(), a.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	waitForIDs(t, ids, []string{}, 2*time.Second)
}

func TestWatchFullResyncHealsChangesMadeBehindTheStoresBack(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb := r.Client()
	store := newStore(t, rdb, Config{})
	a := createSub(t, store, "a")

	// Every 30th resync lists the set whatever its version says.
	ids := watchIDs(t, store, 20*time.Millisecond)
	waitForIDs(t, ids, []string{a.ID}, 2*time.Second)

	// Removed behind the store's back: no message is ever published and
	// the version does not move.
	if err := rdb.HDel(context.Background(), "keyhook:subscriptions", a.ID).Err(); err != nil {
		t.Fatalf("HDEL: %v", err)
	}
	waitForIDs(t, ids, []string{}, 5*time.Second)
}

func TestWatchResyncSeesAChangeWhoseMessageWasLost(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb := r.Client()
	store := newStore(t, rdb, Config{})
	a := createSub(t, store, "a")

	// A full resync (every 30th, 30 s) cannot come within the wait below:
	// only the version can tell the resync of the change.
	ids := watchIDs(t, store, time.Second)
	waitForIDs(t, ids, []string{a.ID}, 2*time.Second)

	// What a store's script writes, without the message it publishes.
	b := storeUnannounced(t, rdb, "b", a.CreatedAt.Add(time.Millisecond))
	waitForIDs(t, ids, []string{a.ID, b.ID}, 3*time.Second)
}

func TestWatchOfAnUnchangedSetReadsOnlyItsVersion(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb := r.Client()
	store := newStore(t, rdb, Config{})
	for _, name := range []string{"a", "b", "c"} {
		createSub(t, store, name)
	}
	cmds := testutil.CountCommands(rdb)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const resync = 20 * time.Millisecond
	var mu sync.Mutex
	calls, sizes := 0, map[int]bool{}
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		_ = store.Watch(ctx, resync, func(subs []*Subscription) {
			mu.Lock()
			defer mu.Unlock()
			calls++
			sizes[len(subs)] = true
		})
	}()
	testutil.WaitFor(t, 10*time.Second, "ten calls of fn", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return calls >= 10
	})
	cancel()
	<-done
	took := time.Since(start)

	got := cmds.Take()
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) != 1 || !sizes[3] {
		t.Fatalf("fn called with set sizes %v; want each call with the 3 subscriptions", sizes)
	}
	// The one at start, and one every 30 resyncs whatever the version.
	if want := 1 + int(took/(30*resync)); got["hgetall"] > want {
		t.Errorf("%d HGETALLs of the set over %d calls of fn in %v; want at most %d: an unchanged set is listed at start and every 30 resyncs only",
			got["hgetall"], calls, took.Round(time.Millisecond), want)
	}
	if got["get"] < calls-1 {
		t.Errorf("%d GETs of the version over %d calls of fn; want one per resync", got["get"], calls)
	}
}

func TestWatchSurvivesRedisRestart(t *testing.T) {
	for _, keepData := range []bool{false, true} {
		name := map[bool]string{false: "data lost", true: "data kept"}[keepData]
		t.Run(name, func(t *testing.T) {
			r := testutil.StartRedis(t)
			watcher, writer := newStore(t, r.Client(), Config{}), newStore(t, r.Client(), Config{})
			a := createSub(t, writer, "a")

			ids := watchIDs(t, watcher, noResync)
			waitForIDs(t, ids, []string{a.ID}, 2*time.Second)

			r.Restart(keepData)
			want := []string{}
			if keepData {
				want = []string{a.ID}
			}
			// The feed's reconnection alone reports the set Redis came
			// back with (noResync rules out the periodic resync).
			waitForIDs(t, ids, want, 5*time.Second)

			b := createSub(t, writer, "b")
			waitForIDs(t, ids, append(want, b.ID), 2*time.Second)
		})
	}
}

func TestWatchWaitsQuietlyForUnreachableRedisAndStopsWithContext(t *testing.T) {
	// Nothing listens on a port that was free a moment ago.
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(testutil.FreePort(t)), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	store := newStore(t, rdb, Config{})

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	calls := 0
	start := time.Now()
	err := store.Watch(ctx, 50*time.Millisecond, func([]*Subscription) { calls++ })
	if err != nil {
		t.Errorf("Watch = %v, want nil when its context ends", err)
	}
	if calls != 0 {
		t.Errorf("fn called %d times with Redis unreachable, want 0", calls)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Watch returned %v after start, want soon after its 500ms context ended", d)
	}
}

// An announced change that follows the version Watch holds reads its own
// subscription, never the whole set: a node listed and decoded every
// subscription on every change, half a million decodes per node while
// 1,000 were created.
func TestWatchReadsOnlyTheChangedSubscriptionAfterAnAnnouncedChange(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb := r.Client()
	// The writer's own commands go through a client of its own, not counted.
	watcher, writer := newStore(t, rdb, Config{}), newStore(t, r.Client(), Config{})
	writer.now = steppingClock() // the set's order is the order of creation
	var want []string
	for i := range 20 {
		want = append(want, createSub(t, writer, fmt.Sprintf("s%d", i)).ID)
	}
	ids := watchIDs(t, watcher, noResync)
	waitForIDs(t, ids, want, 2*time.Second)
	cmds := testutil.CountCommands(rdb)

	ctx := context.Background()
	changes := 0
	for i := range 5 {
		want = append(want, createSub(t, writer, fmt.Sprintf("new%d", i)).ID)
		changes++
	}
	for _, id := range want[:5] {
		if _, err := writer.Update(ctx, id, AnyVersion, func(s *Subscription) error { s.MaxInFlight = 7; return nil }); err != nil {
			t.Fatal(err)
		}
		changes++
	}
	for _, id := range want[5:10] {
		if err := writer.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
		changes++
	}
	want = append(want[:5], want[10:]...)
	waitForIDs(t, ids, want, 5*time.Second)

	got := cmds.Take()
	if got["hgetall"] != 0 {
		t.Errorf("%d listings of the set for %d announced changes, want none: each change reads its own subscription", got["hgetall"], changes)
	}
	if got["hget"] != changes {
		t.Errorf("%d reads of a subscription for %d announced changes, want one each", got["hget"], changes)
	}
}

// An announcement whose version skips one (the message of a change before
// it was lost) lists the set, which has the lost change too.
func TestWatchListsTheSetWhenAnAnnouncedVersionSkipsOne(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb := r.Client()
	store := newStore(t, rdb, Config{})
	a := createSub(t, store, "a")
	ids := watchIDs(t, store, noResync)
	waitForIDs(t, ids, []string{a.ID}, 2*time.Second)

	b := storeUnannounced(t, rdb, "b", a.CreatedAt.Add(time.Millisecond))
	c := createSub(t, store, "c")
	waitForIDs(t, ids, []string{a.ID, b.ID, c.ID}, 2*time.Second)
}

// An announcement of the id alone, as a node of an earlier release makes
// it, lists the set.
func TestWatchListsTheSetOnAnAnnouncementWithoutAVersion(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb := r.Client()
	store := newStore(t, rdb, Config{})
	a := createSub(t, store, "a")
	ids := watchIDs(t, store, noResync)
	waitForIDs(t, ids, []string{a.ID}, 2*time.Second)

	b := storeUnannounced(t, rdb, "b", a.CreatedAt.Add(time.Millisecond))
	if err := rdb.Publish(context.Background(), "keyhook:subscriptions:changed", b.ID).Err(); err != nil {
		t.Fatal(err)
	}
	waitForIDs(t, ids, []string{a.ID, b.ID}, 2*time.Second)
}

// storeUnannounced writes a subscription named name as a store's script
// does, moving the set's version, without announcing it.
func storeUnannounced(t *testing.T, rdb redis.UniversalClient, name string, created time.Time) *Subscription {
	t.Helper()
	sub := &Subscription{ID: "sub_" + strings.Repeat(name, 20)[:20], Name: name, Topics: []string{"orders"},
		Endpoint: Endpoint{URL: "https://h.example"}, CreatedAt: created, Version: 1}
	data, err := json.Marshal(sub)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, "keyhook:subscriptions", sub.ID, data)
		p.Incr(ctx, "keyhook:{keyhook:subscriptions}:version")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return sub
}
