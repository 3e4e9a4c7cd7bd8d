package tracking

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/tracking/offsets"
	"github.com/redis/go-redis/v9"
)

// newStore starts a redis-server for the test and returns a Store over it
// with cfg, a raw client to seed and inspect the server, and the server.
func newStore(t *testing.T, cfg Config) (*Store, *redis.Client, *testutil.Redis) {
	t.Helper()
	srv := testutil.StartRedis(t)
	rdb := srv.Client()
	s, err := New(rdb, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s, rdb, srv
}

// stored returns pk's tracking HASH exactly as Redis holds it.
func stored(t *testing.T, s *Store, rdb *redis.Client, pk PartitionKey) map[string]string {
	t.Helper()
	h, err := rdb.HGetAll(context.Background(), s.key(pk)).Result()
	if err != nil {
		t.Fatalf("HGETALL %s: %v", pk, err)
	}
	return h
}

// serverNow returns the Redis server's clock, the one the scripts use.
func serverNow(t *testing.T, rdb *redis.Client) time.Time {
	t.Helper()
	now, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	return now
}

// load returns pk's stored state, failing the test when there is none.
func load(t *testing.T, s *Store, pk PartitionKey) PartitionState {
	t.Helper()
	got, err := s.Load(context.Background(), []PartitionKey{pk})
	if err != nil {
		t.Fatalf("Load %s: %v", pk, err)
	}
	st, ok := got[pk]
	if !ok {
		t.Fatalf("Load %s: no state", pk)
	}
	return st
}

func mustClaim(t *testing.T, s *Store, pk PartitionKey, owner string, gen int32) Claim {
	t.Helper()
	c, err := s.Claim(context.Background(), pk, owner, gen)
	if err != nil {
		t.Fatalf("Claim(%s, %q, %d): %v", pk, owner, gen, err)
	}
	return c
}

func setOf(rs ...offsets.Range) *offsets.Set {
	s := new(offsets.Set)
	for _, r := range rs {
		s.Add(r.Start, r.End)
	}
	return s
}

var pkA = PartitionKey{Subscription: "sub-1", Topic: "orders", Partition: 3}

func TestClaimFlushLoadRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, _, _ := newStore(t, Config{})

	first := mustClaim(t, s, pkA, "node-a", 1)
	if first.Epoch <= 0 || first.Acked == nil || first.Acked.Len() != 0 || first.Committed != -1 || first.PrevOwner != "" {
		t.Fatalf("first claim = %+v; want a positive epoch, empty acked set, committed -1, no previous owner", first)
	}

	oldest := time.UnixMilli(1_700_000_000_123).UTC()
	acked := setOf(offsets.Range{Start: 105, End: 110}, offsets.Range{Start: 112, End: 113})
	err := s.Flush(ctx, pkA, Flush{
		Epoch: first.Epoch, Acked: acked, Watermark: 100, Fetched: 120, Committed: 98,
		Pending: 13, InFlight: 4, Oldest: oldest,
	})
	if err != nil {
		t.Fatalf("Flush: %v", err)
	}

	missing := PartitionKey{Subscription: "sub-1", Topic: "orders", Partition: 4}
	got, err := s.Load(ctx, []PartitionKey{pkA, missing})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := map[PartitionKey]PartitionState{pkA: {
		Topic: "orders", Partition: 3, Owner: "node-a", Epoch: first.Epoch, Generation: 1,
		Watermark: 100, Fetched: 120, Committed: 98, Pending: 13, InFlight: 4,
		AckedRanges: []offsets.Range{{Start: 105, End: 110}, {Start: 112, End: 113}},
		Oldest:      oldest,
	}}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(PartitionState{}, "Acked", "Claimed", "Updated", "Ranges")); diff != "" {
		t.Errorf("Load (-want +got):\n%s", diff)
	}
	st := got[pkA]
	if st.Acked.String() != "105-109,112" {
		t.Errorf("Load Acked = %q; want %q", st.Acked.String(), "105-109,112")
	}
	if st.Updated.IsZero() || st.Claimed.IsZero() || st.Updated.Before(st.Claimed) {
		t.Errorf("Load Claimed %v, Updated %v; want both set, updated not before claimed", st.Claimed, st.Updated)
	}

	// A takeover sees what the first owner flushed.
	second := mustClaim(t, s, pkA, "node-b", 2)
	if second.Epoch <= first.Epoch {
		t.Errorf("second claim epoch %d; want above %d", second.Epoch, first.Epoch)
	}
	if second.Acked.String() != "105-109,112" || second.Committed != 98 || second.PrevOwner != "node-a" {
		t.Errorf("second claim = acked %q, committed %d, prev %q; want %q, 98, %q",
			second.Acked, second.Committed, second.PrevOwner, "105-109,112", "node-a")
	}
}

func TestPartitionStateJSONShape(t *testing.T) {
	st := PartitionState{
		Topic: "orders", Partition: 1, Committed: -1,
		AckedRanges: []offsets.Range{{Start: 5, End: 10}},
		Updated:     time.UnixMilli(1_700_000_000_000).UTC(),
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	want := map[string]any{
		"topic": "orders", "partition": 1.0, "owner": "", "epoch": 0.0, "generation": 0.0,
		"watermark": 0.0, "fetched": 0.0, "committed": -1.0, "pending": 0.0, "in_flight": 0.0, "keys": 0.0,
		"acked_ranges": []any{map[string]any{"start": 5.0, "end": 10.0}},
		"updated":      "2023-11-14T22:13:20Z",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("JSON (-want +got):\n%s", diff)
	}
}

func TestLoadOfNothingMakesNoRoundTrip(t *testing.T) {
	s, rdb, _ := newStore(t, Config{})
	rec := &recorder{}
	rdb.AddHook(rec)
	got, err := s.Load(context.Background(), nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("Load(nil) = %v, %v; want empty, nil", got, err)
	}
	if n := rec.roundTrips(); n != 0 {
		t.Errorf("Load(nil) made %d round trips; want 0", n)
	}
}

func TestNewerClaimFencesTheFormerOwnerAndChangesNothing(t *testing.T) {
	ctx := context.Background()
	s, rdb, _ := newStore(t, Config{})
	a := mustClaim(t, s, pkA, "node-a", 4)
	if err := s.Flush(ctx, pkA, Flush{Epoch: a.Epoch, Acked: setOf(offsets.Range{Start: 10, End: 20}), Watermark: 5, Committed: 5}); err != nil {
		t.Fatalf("owner's Flush: %v", err)
	}
	b := mustClaim(t, s, pkA, "node-b", 5)
	if b.Epoch <= a.Epoch {
		t.Fatalf("second claim epoch %d; want above %d", b.Epoch, a.Epoch)
	}
	before := stored(t, s, rdb, pkA)

	err := s.Flush(ctx, pkA, Flush{Epoch: a.Epoch, Acked: setOf(offsets.Range{Start: 0, End: 100}), Watermark: 100, Committed: 100})
	if !errors.Is(err, ErrFenced) {
		t.Errorf("zombie Flush error = %v; want ErrFenced", err)
	}
	if err := s.Release(ctx, pkA, a.Epoch); !errors.Is(err, ErrFenced) {
		t.Errorf("zombie Release error = %v; want ErrFenced", err)
	}
	if diff := cmp.Diff(before, stored(t, s, rdb, pkA)); diff != "" {
		t.Errorf("fenced calls changed the HASH (-before +after):\n%s", diff)
	}

	// The new owner is unaffected, and its release keeps the state.
	if err := s.Flush(ctx, pkA, Flush{Epoch: b.Epoch, Acked: b.Acked, Watermark: 5, Committed: 5}); err != nil {
		t.Fatalf("new owner's Flush: %v", err)
	}
	if err := s.Release(ctx, pkA, b.Epoch); err != nil {
		t.Fatalf("new owner's Release: %v", err)
	}
	if st := load(t, s, pkA); st.Owner != "" || st.Epoch != b.Epoch {
		t.Errorf("after release owner %q epoch %d; want \"\" and %d", st.Owner, st.Epoch, b.Epoch)
	}
	c := mustClaim(t, s, pkA, "node-c", 6)
	if c.PrevOwner != "" || c.Acked.String() != "10-19" || c.Epoch <= b.Epoch {
		t.Errorf("claim after release = prev %q, acked %q, epoch %d; want \"\", %q, above %d", c.PrevOwner, c.Acked, c.Epoch, "10-19", b.Epoch)
	}
}

func TestClaimFromAnOlderGenerationWaitsUntilTheStateIsStale(t *testing.T) {
	const stale = 30 * time.Second
	tests := []struct {
		name        string
		claimGen    int32
		updatedAgo  time.Duration
		wantFenced  bool
		wantRefusal string
	}{
		{name: "older generation, fresh state: refused", claimGen: 6, updatedAgo: 0, wantFenced: true},
		{name: "older generation, updated just under the limit: refused", claimGen: 6, updatedAgo: stale - 5*time.Second, wantFenced: true},
		{name: "older generation, stale state: accepted", claimGen: 6, updatedAgo: stale + time.Second},
		{name: "same generation, fresh state: accepted", claimGen: 7, updatedAgo: 0},
		{name: "newer generation, fresh state: accepted", claimGen: 8, updatedAgo: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			s, rdb, _ := newStore(t, Config{StaleClaim: stale})
			held := mustClaim(t, s, pkA, "node-a", 7)
			// Age the state on the server's own clock rather than sleeping.
			updated := serverNow(t, rdb).Add(-tt.updatedAgo).UnixMilli()
			if err := rdb.HSet(ctx, s.key(pkA), claimField(held.Epoch, fieldUpdated), updated).Err(); err != nil {
				t.Fatalf("age state: %v", err)
			}
			before := stored(t, s, rdb, pkA)

			c, err := s.Claim(ctx, pkA, "node-z", tt.claimGen)
			if tt.wantFenced {
				if !errors.Is(err, ErrFenced) {
					t.Fatalf("Claim error = %v; want ErrFenced", err)
				}
				if diff := cmp.Diff(before, stored(t, s, rdb, pkA)); diff != "" {
					t.Errorf("refused claim changed the HASH (-before +after):\n%s", diff)
				}
				if err := s.Flush(ctx, pkA, Flush{Epoch: held.Epoch, Committed: -1}); err != nil {
					t.Errorf("holder's Flush after a refused claim: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Claim: %v", err)
			}
			if st := load(t, s, pkA); st.Owner != "node-z" || st.Generation != tt.claimGen || c.Epoch <= held.Epoch {
				t.Errorf("after claim owner %q gen %d epoch %d; want node-z, %d, above %d", st.Owner, st.Generation, c.Epoch, tt.claimGen, held.Epoch)
			}
		})
	}
}

func TestFlushAfterRedisLostItsDataReportsStateLost(t *testing.T) {
	ctx := context.Background()
	s, rdb, srv := newStore(t, Config{})
	key := s.key(pkA)
	old := mustClaim(t, s, pkA, "node-a", 1)
	if err := s.Flush(ctx, pkA, Flush{Epoch: old.Epoch, Watermark: 10, Committed: 9}); err != nil {
		t.Fatalf("Flush: %v", err)
	}

	for _, lose := range []struct {
		name string
		do   func()
	}{
		{"FLUSHALL", func() {
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				t.Fatalf("FLUSHALL: %v", err)
			}
		}},
		// A restart also empties the script cache: the scripts must be
		// sent again transparently.
		{"restart without persistence", func() { srv.Restart(false) }},
	} {
		lose.do()
		if err := s.Flush(ctx, pkA, Flush{Epoch: old.Epoch, Watermark: 11, Committed: 10}); !errors.Is(err, ErrStateLost) {
			t.Fatalf("after %s: Flush error = %v; want ErrStateLost", lose.name, err)
		}
		if err := s.Release(ctx, pkA, old.Epoch); !errors.Is(err, ErrStateLost) {
			t.Fatalf("after %s: Release error = %v; want ErrStateLost", lose.name, err)
		}
		if n, err := rdb.Exists(ctx, key).Result(); err != nil || n != 0 {
			t.Fatalf("after %s: key exists = %d, %v; a failed Flush must write nothing", lose.name, n, err)
		}

		// The owner claims again. Its new epoch must not repeat an old one,
		// or a zombie holding that epoch could write again.
		again := mustClaim(t, s, pkA, "node-a", 1)
		if again.Epoch <= old.Epoch || again.Acked.Len() != 0 || again.Committed != -1 {
			t.Fatalf("after %s: re-claim = %+v; want epoch above %d, nothing acked, committed -1", lose.name, again, old.Epoch)
		}
		if err := s.Flush(ctx, pkA, Flush{Epoch: old.Epoch}); !errors.Is(err, ErrFenced) {
			t.Errorf("after %s: Flush with the pre-loss epoch error = %v; want ErrFenced", lose.name, err)
		}
		if err := s.Flush(ctx, pkA, Flush{Epoch: again.Epoch, Watermark: 10, Committed: -1}); err != nil {
			t.Fatalf("after %s: Flush after re-claim: %v", lose.name, err)
		}
		old = again
	}
}

// recorder is a go-redis hook that records every command sent, single or
// pipelined.
type recorder struct {
	mu        sync.Mutex
	single    [][]any
	piped     [][]any
	pipelines int
}

func (r *recorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *recorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.mu.Lock()
		r.single = append(r.single, cmd.Args())
		r.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (r *recorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.mu.Lock()
		r.pipelines++
		for _, c := range cmds {
			r.piped = append(r.piped, c.Args())
		}
		r.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (r *recorder) roundTrips() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.single) + r.pipelines
}

func (r *recorder) commands() [][]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append(append([][]any(nil), r.single...), r.piped...)
}

func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.single, r.piped, r.pipelines = nil, nil, 0
}

func TestFlushIsOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, rdb, _ := newStore(t, Config{})
	rec := &recorder{}
	rdb.AddHook(rec)
	c := mustClaim(t, s, pkA, "node-a", 1)
	// The first call after a server start may need EVALSHA then EVAL to
	// load the script; every later one must be a single command.
	if err := s.Flush(ctx, pkA, Flush{Epoch: c.Epoch, Committed: -1}); err != nil {
		t.Fatalf("warm-up Flush: %v", err)
	}
	big := new(offsets.Set)
	for o := int64(1000); o < 3000; o += 3 {
		big.AddOffset(o)
	}
	rec.reset()
	if err := s.Flush(ctx, pkA, Flush{Epoch: c.Epoch, Acked: big, Watermark: 999, Fetched: 3000, Committed: 998, Pending: 1300}); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if n := rec.roundTrips(); n != 1 {
		t.Errorf("Flush made %d round trips (%v); want 1", n, rec.commands())
	}
	if cmds := rec.commands(); len(cmds) == 1 && !strings.EqualFold(cmds[0][0].(string), "evalsha") {
		t.Errorf("Flush sent %v; want EVALSHA", cmds[0][0])
	}
}

// hashTag returns the part of key Redis Cluster hashes: the content of the
// first {...} when it is non-empty, else the whole key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

func TestEveryScriptCallKeepsItsKeysInOneHashSlot(t *testing.T) {
	ctx := context.Background()
	s, rdb, _ := newStore(t, Config{Prefix: "kh:test"})
	rec := &recorder{}
	rdb.AddHook(rec)
	pks := []PartitionKey{
		pkA,
		{Subscription: "sub:with:colons", Topic: "t.x-y_z", Partition: 0},
		{Subscription: "sub*?[x]", Topic: "orders", Partition: 2147483647},
	}
	for _, pk := range pks {
		c := mustClaim(t, s, pk, "node-a", 1)
		if err := s.Flush(ctx, pk, Flush{Epoch: c.Epoch, Committed: -1}); err != nil {
			t.Fatalf("Flush %s: %v", pk, err)
		}
		if err := s.Release(ctx, pk, c.Epoch); err != nil {
			t.Fatalf("Release %s: %v", pk, err)
		}
	}
	scripts := 0
	tags := map[string]bool{}
	for _, args := range rec.commands() {
		name := strings.ToLower(args[0].(string))
		if name != "eval" && name != "evalsha" {
			continue
		}
		scripts++
		n, err := strconv.Atoi(fmt.Sprint(args[2]))
		if err != nil || n < 1 {
			t.Fatalf("%s numkeys %v: want at least one key", name, args[2])
		}
		first := hashTag(args[3].(string))
		for _, k := range args[3 : 3+n] {
			if tag := hashTag(k.(string)); tag != first {
				t.Errorf("%s keys %v span hash tags %q and %q", name, args[3:3+n], first, tag)
			}
		}
		tags[first] = true
	}
	if scripts < 3*len(pks) {
		t.Fatalf("recorded %d script calls; want at least %d", scripts, 3*len(pks))
	}
	// One tag per partition: partitions spread over the cluster.
	want := map[string]bool{}
	for _, pk := range pks {
		want[pk.Subscription+":"+pk.Topic+":"+strconv.Itoa(int(pk.Partition))] = true
	}
	if diff := cmp.Diff(want, tags); diff != "" {
		t.Errorf("hash tags (-want +got):\n%s", diff)
	}
}

func TestDeleteSubscriptionRemovesOnlyItsKeys(t *testing.T) {
	ctx := context.Background()
	s, rdb, _ := newStore(t, Config{})
	// Enough partitions that SCAN needs several steps.
	var mine []PartitionKey
	pipe := rdb.Pipeline()
	for p := range int32(1500) {
		pk := PartitionKey{Subscription: "a", Topic: "orders", Partition: p}
		mine = append(mine, pk)
		pipe.HSet(ctx, s.key(pk), fieldEpoch, 1)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatalf("seed: %v", err)
	}
	mustClaim(t, s, PartitionKey{Subscription: "a", Topic: "payments", Partition: 0}, "node-a", 1)
	others := []PartitionKey{
		{Subscription: "a:b", Topic: "orders", Partition: 0}, // extends "a" across a colon
		{Subscription: "ab", Topic: "orders", Partition: 0},
		{Subscription: "b", Topic: "orders", Partition: 0},
	}
	for _, pk := range others {
		mustClaim(t, s, pk, "node-a", 1)
	}
	if err := rdb.Set(ctx, "unrelated", "x", 0).Err(); err != nil {
		t.Fatalf("seed: %v", err)
	}

	if err := s.DeleteSubscription(ctx, "a"); err != nil {
		t.Fatalf("DeleteSubscription: %v", err)
	}
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatalf("KEYS: %v", err)
	}
	want := []string{"unrelated"}
	for _, pk := range others {
		want = append(want, s.key(pk))
	}
	if diff := cmp.Diff(want, keys, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("keys left (-want +got):\n%s", diff)
	}
}

func TestInvalidPartitionKeysAreRefusedAndWriteNothing(t *testing.T) {
	ctx := context.Background()
	s, rdb, _ := newStore(t, Config{})
	bad := []PartitionKey{
		{Subscription: "", Topic: "orders"},
		{Subscription: "s{1}", Topic: "orders"},
		{Subscription: "s", Topic: ""},
		{Subscription: "s", Topic: "a:b"},
		{Subscription: "s", Topic: "a}b"},
		{Subscription: "s", Topic: "orders", Partition: -1},
	}
	for _, pk := range bad {
		if _, err := s.Claim(ctx, pk, "node-a", 1); !errors.Is(err, errInvalidKey) {
			t.Errorf("Claim(%+v) error = %v; want errInvalidKey", pk, err)
		}
		if err := s.Flush(ctx, pk, Flush{Epoch: 1}); !errors.Is(err, errInvalidKey) {
			t.Errorf("Flush(%+v) error = %v; want errInvalidKey", pk, err)
		}
		if _, err := s.Load(ctx, []PartitionKey{pk}); !errors.Is(err, errInvalidKey) {
			t.Errorf("Load(%+v) error = %v; want errInvalidKey", pk, err)
		}
	}
	if _, err := s.Claim(ctx, pkA, "", 1); err == nil {
		t.Errorf("Claim with an empty owner succeeded; want an error")
	}
	if err := s.DeleteSubscription(ctx, ""); !errors.Is(err, errInvalidKey) {
		t.Errorf("DeleteSubscription(\"\") error = %v; want errInvalidKey", err)
	}
	if n, err := rdb.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Errorf("DBSIZE = %d, %v; want 0", n, err)
	}
}

func TestLoadRejectsCorruptState(t *testing.T) {
	ctx := context.Background()
	s, rdb, _ := newStore(t, Config{})
	c := mustClaim(t, s, pkA, "node-a", 1)
	if err := rdb.HSet(ctx, s.key(pkA), claimField(c.Epoch, fieldAcked), "\x05\x01").Err(); err != nil {
		t.Fatalf("corrupt: %v", err)
	}
	if _, err := s.Load(ctx, []PartitionKey{pkA}); err == nil || !strings.Contains(err.Error(), pkA.String()) {
		t.Errorf("Load of a corrupt acked field error = %v; want an error naming %s", err, pkA)
	}
	if _, err := s.Claim(ctx, pkA, "node-b", 2); err == nil {
		t.Errorf("Claim over a corrupt acked field succeeded; want an error")
	}
}
