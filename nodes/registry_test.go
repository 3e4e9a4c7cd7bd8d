package nodes

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/keyhook/keyhook/internal/testutil"
)

// clock is a settable clock for the registry.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

func newRegistry(t *testing.T, rdb redis.UniversalClient, c *clock) *Registry {
	t.Helper()
	r, err := New(rdb, Config{Interval: 10 * time.Millisecond, LiveFor: 10 * time.Second, PruneAfter: time.Hour,
		Now: c.Now, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// waitFor polls List until cond holds.
func waitFor(t *testing.T, r *Registry, cond func([]Info) bool) []Info {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		list, err := r.List(context.Background())
		if err == nil && cond(list) {
			return list
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition never held; last list %+v, %v", list, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRunHeartbeatsOwnershipAndRemovesItselfOnStop(t *testing.T) {
	rdb := testutil.StartRedis(t).Client()
	c := &clock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	r := newRegistry(t, rdb, c)

	var mu sync.Mutex
	owned := []Ownership{{Subscription: "sub_a", Topic: "orders", Partition: 1}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- r.Run(ctx, Info{ID: "node-1", Version: "v9", Roles: []string{"dispatcher"}}, func() []Ownership {
			mu.Lock()
			defer mu.Unlock()
			return append([]Ownership(nil), owned...)
		})
	}()
	list := waitFor(t, r, func(l []Info) bool { return len(l) == 1 })
	want := Info{ID: "node-1", Version: "v9", StartedAt: c.Now(), HeartbeatAt: c.Now(), Roles: []string{"dispatcher"}, Owned: owned}
	if diff := cmp.Diff([]Info{want}, list); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}

	// Later heartbeats carry the current ownership and time.
	mu.Lock()
	owned = append(owned, Ownership{Subscription: "sub_a", Topic: "orders", Partition: 2})
	mu.Unlock()
	c.set(c.Now().Add(time.Second))
	waitFor(t, r, func(l []Info) bool { return len(l) == 1 && len(l[0].Owned) == 2 && l[0].HeartbeatAt.Equal(c.Now()) })

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n, _ := rdb.HLen(context.Background(), "keyhook:nodes").Result(); n != 0 {
		t.Errorf("%d entries after a graceful stop, want 0", n)
	}
}

func TestSilentNodesAreNotLiveAndArePrunedLater(t *testing.T) {
	ctx := context.Background()
	rdb := testutil.StartRedis(t).Client()
	c := &clock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	r := newRegistry(t, rdb, c)
	put := func(id string, at time.Time) {
		data, _ := json.Marshal(Info{ID: id, HeartbeatAt: at, Roles: []string{}, Owned: []Ownership{}})
		rdb.HSet(ctx, "keyhook:nodes", id, data)
	}
	put("fresh", c.Now().Add(-9*time.Second))
	put("silent", c.Now().Add(-11*time.Second))
	put("dead", c.Now().Add(-2*time.Hour))
	rdb.HSet(ctx, "keyhook:nodes", "garbage", "{")

	list, err := r.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != "fresh" {
		t.Errorf("live nodes = %+v, want only fresh", list)
	}

	// A running node prunes what has been silent for PruneAfter.
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx, Info{ID: "self"}, nil) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ids, _ := rdb.HKeys(ctx, "keyhook:nodes").Result()
		if slices.Sort(ids); cmp.Equal(ids, []string{"fresh", "self", "silent"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("entries = %v, want dead and garbage pruned", ids)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
}

func TestRunSurvivesRedisOutage(t *testing.T) {
	srv := testutil.StartRedis(t)
	rdb := srv.Client()
	c := &clock{now: time.Now()}
	r := newRegistry(t, rdb, c)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, Info{ID: "n"}, nil) }()
	waitFor(t, r, func(l []Info) bool { return len(l) == 1 })
	srv.Restart(false) // the entry is gone with the data
	waitFor(t, r, func(l []Info) bool { return len(l) == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestNewNamesTheBadField(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	for _, tt := range []struct {
		cfg   Config
		field string
	}{
		{Config{Prefix: "kh{x}"}, "Prefix"},
		{Config{Interval: -1}, "Interval"},
		{Config{Interval: 10 * time.Second, LiveFor: 5 * time.Second}, "LiveFor"},
		{Config{Interval: 20 * time.Second}, "LiveFor"}, // the default LiveFor, 10s
		{Config{LiveFor: time.Minute, PruneAfter: time.Second}, "PruneAfter"},
	} {
		if _, err := New(rdb, tt.cfg); err == nil || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("New(%+v) = %v; want an error naming %s", tt.cfg, err, tt.field)
		}
	}
	if _, err := New(rdb, Config{}); err != nil {
		t.Errorf("New with the zero Config: %v", err)
	}
	if _, err := New(nil, Config{}); err == nil {
		t.Error("New(nil) accepted")
	}
}

func TestRunPrunesOncePerPruneIntervalNotEveryHeartbeat(t *testing.T) {
	rdb := testutil.StartRedis(t).Client()
	c := &clock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	r := newRegistry(t, rdb, c) // heartbeats every 10ms, PruneAfter an hour: prunes every minute
	cmds := testutil.CountCommands(rdb)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, Info{ID: "self"}, nil) }()
	defer func() { cancel(); <-done }()

	counts := map[string]int{}
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 5s; commands %v", what, counts)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	take := func() {
		for k, n := range cmds.Take() {
			counts[k] += n
		}
	}
	wait("20 heartbeats", func() bool { take(); return counts["hset"] >= 20 })
	if got := counts["hgetall"]; got != 1 {
		t.Fatalf("%d reads of every node's entry in %d heartbeats within a minute; want 1, the first heartbeat's prune", got, counts["hset"])
	}
	c.set(c.Now().Add(time.Minute))
	wait("the next prune, a minute on", func() bool { take(); return counts["hgetall"] == 2 })
}

func TestOwnershipIsEncodedAgainOnlyWhenItChanged(t *testing.T) {
	var c ownedCache
	owned := []Ownership{{Subscription: "sub_a", Topic: "orders", Partition: 1, Claimed: true}}
	first, err := c.encode(owned)
	if err != nil {
		t.Fatal(err)
	}
	same, err := c.encode(append([]Ownership(nil), owned...))
	if err != nil || &same[0] != &first[0] {
		t.Fatalf("an unchanged ownership was encoded again (%s, %v)", same, err)
	}
	changed, err := c.encode([]Ownership{{Subscription: "sub_a", Topic: "orders", Partition: 1}})
	if err != nil || string(changed) != `[{"subscription":"sub_a","topic":"orders","partition":1,"claimed":false}]` {
		t.Fatalf("a changed ownership encodes as %s, %v", changed, err)
	}
}

// The stored entry is what encoding/json makes of Info with its ownership
// last (after heartbeat_at, which prune reads alone), byte for byte,
// though the ownership's JSON is spliced in as cached.
func TestTheStoredEntryIsInfoAsJSONWithTheOwnershipLast(t *testing.T) {
	at := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	for _, info := range []Info{
		{ID: "n1", Version: "v", StartedAt: at, HeartbeatAt: at, Roles: []string{"api", "dispatch"}, Owned: []Ownership{}},
		{ID: "n<2>&", HeartbeatAt: at, Owned: []Ownership{{Subscription: "sub_a", Topic: "t<&>", Partition: 3, Claimed: true, Ranges: "0-100", Reader: "keyhook-read-ab", CatchingUp: true}},
			Breakers: []Breaker{{Origin: "http://x", State: "open", Since: at, Waiting: 2}}},
	} {
		var c ownedCache
		owned, err := c.encode(info.Owned)
		if err != nil {
			t.Fatal(err)
		}
		got, err := encodeInfo(info, owned)
		if err != nil {
			t.Fatal(err)
		}
		var back Info
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("the entry %s does not decode: %v", got, err)
		}
		if diff := cmp.Diff(info, back); diff != "" {
			t.Errorf("the entry decodes to another Info (-want +got):\n%s", diff)
		}
		// What encoding/json makes of the same, the ownership as a
		// RawMessage last: the entry as it was before the splice.
		want, err := json.Marshal(struct {
			Info
			Owned json.RawMessage `json:"owned"`
		}{info, owned})
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("the entry is\n%s\nencoding/json makes\n%s", got, want)
		}
		if ownedAt := strings.Index(string(got), `,"owned":`); ownedAt < strings.Index(string(got), `"heartbeat_at"`) {
			t.Errorf("the entry %s has its ownership before heartbeat_at", got)
		}
	}
}

func TestHeartbeatAtReadsOnlyAWellFormedEntrysTime(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		data string
		ok   bool
	}{
		{`{"id":"n","version":"v","started_at":"2030-01-01T00:00:00Z","heartbeat_at":"2030-01-02T03:04:05Z","owned":[]}`, true},
		{`{"roles":["api"],"owned":[{"subscription":"s"}],"heartbeat_at":"2030-01-02T03:04:05Z"}`, true},
		{`{"heartbeat_at":"2030-01-02T03:04:05Z"`, true}, // the rest is not read
		{`{`, false},
		{``, false},
		{`[]`, false},
		{`{"id":"n"}`, false},
		{`{"heartbeat_at":"yesterday"}`, false},
		{`{"owned":[,"heartbeat_at":"2030-01-02T03:04:05Z"}`, false},
	} {
		got, ok := heartbeatAt([]byte(tc.data))
		if ok != tc.ok || (ok && !got.Equal(at)) {
			t.Errorf("heartbeatAt(%s) = %v, %v; want %v", tc.data, got, ok, tc.ok)
		}
	}
}
