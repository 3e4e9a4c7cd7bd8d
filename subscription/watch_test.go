package subscription

import (
	"context"
	"strconv"
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

func TestWatchResyncHealsChangesMadeWithoutAnnouncement(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb := r.Client()
	store := newStore(t, rdb, Config{})
	a := createSub(t, store, "a")

	ids := watchIDs(t, store, 100*time.Millisecond)
	waitForIDs(t, ids, []string{a.ID}, 2*time.Second)

	// Removed behind the store's back: no message is ever published.
	if err := rdb.HDel(context.Background(), "keyhook:subscriptions", a.ID).Err(); err != nil {
		t.Fatalf("HDEL: %v", err)
	}
	waitForIDs(t, ids, []string{}, 2*time.Second)
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
