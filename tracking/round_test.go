package tracking

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/keyhook/keyhook/internal/keyspace"
	"github.com/keyhook/keyhook/tracking/offsets"
	"github.com/redis/go-redis/v9"
)

// roundFixture claims n partitions in various shapes (whole claims,
// shared ones, partition 4 taken over by another owner; n > 4) and
// returns a round of flushes over them.
func roundFixture(t *testing.T, s *Store, n int32) []PartitionFlush {
	t.Helper()
	var fs []PartitionFlush
	for p := range n {
		pk := PartitionKey{Subscription: "sub-1", Topic: "orders", Partition: p}
		f := Flush{Acked: setOf(offsets.Range{Start: 12 + int64(p), End: 14 + int64(p)}), Watermark: 10 + int64(p), Fetched: 20 + int64(p),
			Committed: 9, Pending: int64(p), InFlight: 1, Keys: 2, Oldest: time.UnixMilli(1_700_000_000_000 + int64(p)),
			Holding: &Holding{Offset: 10 + int64(p), Key: "k", Attempts: int(p)}}
		switch p % 3 {
		case 0:
			f.Epoch = mustClaim(t, s, pk, "node-a", 1).Epoch
		case 1:
			// Shared: the flush parses pieces and keeps the other claim.
			f.Epoch, f.Ranges = mustClaimRanges(t, s, pk, "node-a", 1, lower).Epoch, lower
			b := mustClaimRanges(t, s, pk, "node-b", 1, upper)
			flushOne(t, s, pk, Flush{Epoch: b.Epoch, Ranges: upper, Watermark: 5, Committed: -1})
		case 2:
			f.Epoch = mustClaim(t, s, pk, "node-a", 1).Epoch
			f.Committed = -1
		}
		fs = append(fs, PartitionFlush{Key: pk, Flush: f})
	}
	// Partition 4 was taken over since.
	mustClaim(t, s, fs[4].Key, "node-b", 2)
	return fs
}

// A round on a standalone Redis is one EVALSHA and one TIME, and leaves
// exactly the state and answers the partitions' single flushes would:
// same fields, same values, same errors, but for the "updated" stamp,
// which the round reads once for all its partitions.
func TestFlushRoundIsOneCommandAndWritesWhatSingleFlushesWrite(t *testing.T) {
	ctx := context.Background()
	s, rdb, _ := newStore(t, Config{})
	const n = 8
	fs := roundFixture(t, s, n)
	keys := make([]string, n)
	dumps := make([]string, n)
	for i, f := range fs {
		keys[i] = s.key(f.Key)
		d, err := rdb.Dump(ctx, keys[i]).Result()
		if err != nil {
			t.Fatal(err)
		}
		dumps[i] = d
	}
	// snapshot reads every HASH, without the claims' "updated" stamps.
	snapshot := func() ([]map[string]string, []string) {
		var hs []map[string]string
		var stamps []string
		for i, k := range keys {
			h, err := rdb.HGetAll(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			stamp := claimField(fs[i].Flush.Epoch, fieldUpdated)
			stamps = append(stamps, h[stamp])
			for f := range h {
				if strings.HasSuffix(f, ":"+fieldUpdated) {
					delete(h, f)
				}
			}
			hs = append(hs, h)
		}
		return hs, stamps
	}

	var single []FlushResult
	for _, f := range fs {
		single = append(single, s.FlushRanges(ctx, []PartitionFlush{f})[0])
	}
	wantState, _ := snapshot()
	for i, k := range keys {
		if err := rdb.RestoreReplace(ctx, k, 0, dumps[i]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Load the round's script, then count what one round costs the server.
	s.FlushRanges(ctx, fs[:2])
	for i, k := range keys[:2] {
		if err := rdb.RestoreReplace(ctx, k, 0, dumps[i]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	round := s.FlushRanges(ctx, fs)
	stats := commandCalls(t, rdb)
	// INFO itself is counted once it returns; the round is the rest.
	if stats["evalsha"] != 1 || stats["time"] != 1 || stats["hmget"] != n {
		t.Errorf("round of %d partitions: server ran %v; want 1 evalsha, 1 time, %d hmget", n, stats, n)
	}

	gotState, stamps := snapshot()
	if diff := cmp.Diff(wantState, gotState); diff != "" {
		t.Errorf("state after the round (-single flushes +round):\n%s", diff)
	}
	for i, st := range stamps {
		if i != 4 && st != stamps[0] {
			t.Errorf("partition %d stamped %q, partition 0 %q; want one TIME per round", i, st, stamps[0])
		}
	}
	errText := func(err error) string {
		if err == nil {
			return ""
		}
		return err.Error()
	}
	for i := range fs {
		w, g := single[i], round[i]
		if w.Watermark != g.Watermark || w.Committed != g.Committed || errText(w.Err) != errText(g.Err) {
			t.Errorf("partition %d: round answered %+v; single flush %+v", i, g, w)
		}
	}
	if !errors.Is(round[4].Err, ErrFenced) {
		t.Errorf("partition 4 (taken over): err = %v; want ErrFenced", round[4].Err)
	}
	for i, r := range round {
		if i != 4 && r.Err != nil {
			t.Errorf("partition %d: err = %v; want written", i, r.Err)
		}
	}
}

// commandCalls answers INFO commandstats as calls by command name.
func commandCalls(t *testing.T, rdb *redis.Client) map[string]int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		var n int
		for _, c := range calls {
			n = n*10 + int(c-'0')
		}
		out[name] = n
	}
	return out
}

// A partition whose flush fails inside the script (its key holds another
// type) answers its error; the others of the round are written.
func TestFlushRoundKeepsAPartitionsRedisErrorItsOwn(t *testing.T) {
	ctx := context.Background()
	s, rdb, _ := newStore(t, Config{})
	fs := roundFixture(t, s, 6)
	if err := rdb.Del(ctx, s.key(fs[1].Key)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, s.key(fs[1].Key), "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	res := s.FlushRanges(ctx, fs)
	if err := res[1].Err; err == nil || !strings.Contains(err.Error(), "WRONGTYPE") || !strings.Contains(err.Error(), fs[1].Key.String()) {
		t.Errorf("partition 1 (a string key): err = %v; want its WRONGTYPE error", err)
	}
	if !errors.Is(res[4].Err, ErrFenced) {
		t.Errorf("partition 4 (taken over): err = %v; want ErrFenced", res[4].Err)
	}
	for _, i := range []int{0, 2, 3, 5} {
		if res[i].Err != nil {
			t.Errorf("partition %d: err = %v; want written", i, res[i].Err)
			continue
		}
		if st := load(t, s, fs[i].Key); st.Fetched != fs[i].Flush.Fetched {
			t.Errorf("partition %d stored fetched %d; want %d", i, st.Fetched, fs[i].Flush.Fetched)
		}
	}
}

// The groups of a round: everything together on a single server, by slot
// on a cluster, one key each on any other client; never more than
// maxRound.
func TestFlushGroupsFollowWhatAScriptMayTouch(t *testing.T) {
	ks := keyspace.Keyspace{}
	var keys []string
	// Partitions 0..599 of one topic, each in its own slot, then 300
	// keys of one slot, interleaved with them: more than one call holds.
	for p := range int32(600) {
		keys = append(keys, ks.Partition("sub-1", "orders", p))
		if p%2 == 0 {
			keys = append(keys, "other:{hot}:"+strconv.Itoa(int(p)))
		}
	}
	single := redis.NewClient(&redis.Options{Addr: "127.0.0.1:0"})
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:0"}})
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:0"}})
	t.Cleanup(func() { _ = single.Close(); _ = cluster.Close(); _ = ring.Close() })

	check := func(name string, groups [][]int, sameGroup func(a, b int) bool) {
		t.Helper()
		seen := make([]bool, len(keys))
		for _, g := range groups {
			if len(g) == 0 || len(g) > maxRound {
				t.Errorf("%s: group of %d keys; want 1..%d", name, len(g), maxRound)
			}
			for k, j := range g {
				if seen[j] {
					t.Errorf("%s: key %d in two groups", name, j)
				}
				seen[j] = true
				if k > 0 && (j <= g[k-1] || !sameGroup(g[0], j)) {
					t.Errorf("%s: group %v mixes or reorders keys %d and %d", name, g, g[0], j)
				}
			}
		}
		for j, ok := range seen {
			if !ok {
				t.Errorf("%s: key %d in no group", name, j)
			}
		}
	}

	groups := flushGroups(single, keys)
	check("single server", groups, func(int, int) bool { return true })
	if len(groups) != 4 {
		t.Errorf("single server: %d groups of 900 keys; want 4 (256, 256, 256, 132)", len(groups))
	}

	groups = flushGroups(cluster, keys)
	check("cluster", groups, func(a, b int) bool { return keyspace.Slot(keys[a]) == keyspace.Slot(keys[b]) })
	perSlot := map[int]int{}
	for _, k := range keys {
		perSlot[keyspace.Slot(k)]++
	}
	want := 0
	for _, n := range perSlot {
		want += (n + maxRound - 1) / maxRound
	}
	if len(groups) != want || want != 602 {
		t.Errorf("cluster: %d groups; want %d (one per slot, the {hot} slot's 300 keys in two)", len(groups), want)
	}

	groups = flushGroups(ring, keys)
	check("ring", groups, func(a, b int) bool { return a == b })
	if len(groups) != len(keys) {
		t.Errorf("ring: %d groups; want one per key", len(groups))
	}
}

// On Redis Cluster a round spans slots and nodes: partitions sharing a
// slot go in one call of the round's script, the others alone, and every
// partition is written; a fenced one fails alone.
func TestFlushRoundOnRedisClusterGroupsBySlot(t *testing.T) {
	ctx := context.Background()
	s, rdb := newClusterStore(t)
	// Two partitions sharing a slot, and eight others.
	bySlot := map[int]int32{}
	var parts []int32
	for p := int32(0); len(parts) < 2; p++ {
		slot := keyspace.Slot(s.key(PartitionKey{Subscription: "sub-1", Topic: "orders", Partition: p}))
		if q, ok := bySlot[slot]; ok {
			parts = append(parts, q, p)
		}
		bySlot[slot] = p
	}
	for p := range int32(8) {
		parts = append(parts, 10_000+p)
	}
	var fs []PartitionFlush
	for _, p := range parts {
		pk := PartitionKey{Subscription: "sub-1", Topic: "orders", Partition: p}
		c := mustClaim(t, s, pk, "node-a", 1)
		fs = append(fs, PartitionFlush{Key: pk, Flush: Flush{Epoch: c.Epoch, Watermark: int64(p), Fetched: int64(p) + 1, Committed: -1}})
	}
	mustClaim(t, s, fs[1].Key, "node-b", 2)
	if got := flushGroups(rdb, []string{s.key(fs[0].Key), s.key(fs[1].Key)}); len(got) != 1 {
		t.Fatalf("partitions %d and %d: groups %v; want one (they share a slot)", parts[0], parts[1], got)
	}
	for round := range 2 {
		res := s.FlushRanges(ctx, fs)
		for i, r := range res {
			if i == 1 {
				if !errors.Is(r.Err, ErrFenced) {
					t.Errorf("round %d: partition %d (taken over): err = %v; want ErrFenced", round, parts[i], r.Err)
				}
				continue
			}
			if r.Err != nil || r.Watermark != int64(parts[i]) {
				t.Errorf("round %d: partition %d: %+v; want watermark %d", round, parts[i], r, parts[i])
			}
		}
		// Every node forgets the scripts: the next round meets NOSCRIPT.
		if err := rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return c.ScriptFlush(ctx).Err()
		}); err != nil {
			t.Fatal(err)
		}
	}
	if st := load(t, s, fs[0].Key); st.Fetched != fs[0].Flush.Fetched {
		t.Errorf("partition %d stored fetched %d; want %d", parts[0], st.Fetched, fs[0].Flush.Fetched)
	}
}
