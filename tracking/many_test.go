package tracking

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/tracking/offsets"
	"github.com/redis/go-redis/v9"
)

// FlushMany writes every partition of a standalone Redis in one script
// call and answers each on its own: a fenced or lost partition fails
// alone.
func TestFlushManyWritesAllPartitionsInOneCommandAndAnswersEach(t *testing.T) {
	ctx := context.Background()
	s, rdb, _ := newStore(t, Config{})
	const n = 8
	var fs []PartitionFlush
	for p := range int32(n) {
		pk := PartitionKey{Subscription: "sub-1", Topic: "orders", Partition: p}
		c := mustClaim(t, s, pk, "node-a", 1)
		fs = append(fs, PartitionFlush{Key: pk, Flush: Flush{Epoch: c.Epoch, Acked: setOf(offsets.Range{Start: 12, End: 14}), Watermark: 10, Fetched: 14, Committed: 9}})
	}
	// Partition 1 was taken over by another owner, partition 2's key is gone.
	mustClaim(t, s, fs[1].Key, "node-b", 2)
	if err := rdb.Del(ctx, s.key(fs[2].Key)).Err(); err != nil {
		t.Fatal(err)
	}

	// The first round loads the round's script; every later one is one
	// EVALSHA.
	if errs := s.FlushMany(ctx, []PartitionFlush{fs[0], fs[3]}); errs[0] != nil || errs[1] != nil {
		t.Fatalf("warm-up FlushMany: %v", errs)
	}
	rec := &recorder{}
	rdb.AddHook(rec)
	errs := s.FlushMany(ctx, fs)
	if cmds := rec.commands(); rec.roundTrips() != 1 || len(cmds) != 1 || cmds[0][0] != "evalsha" {
		t.Errorf("FlushMany of %d partitions sent %v in %d round trips; want 1 EVALSHA", n, cmds, rec.roundTrips())
	}
	for i, err := range errs {
		switch i {
		case 1:
			if !errors.Is(err, ErrFenced) {
				t.Errorf("partition 1 (claimed by another owner): err = %v; want ErrFenced", err)
			}
		case 2:
			if !errors.Is(err, ErrStateLost) {
				t.Errorf("partition 2 (key gone): err = %v; want ErrStateLost", err)
			}
		default:
			if err != nil {
				t.Errorf("partition %d: err = %v; want nil", i, err)
			}
		}
	}
	st, err := s.Load(ctx, []PartitionKey{fs[0].Key, fs[7].Key})
	if err != nil {
		t.Fatal(err)
	}
	for _, pk := range []PartitionKey{fs[0].Key, fs[7].Key} {
		if p := st[pk]; p.Watermark != 10 || p.Fetched != 14 || !p.Acked.Contains(13) {
			t.Errorf("%s stored %+v; want the flushed state", pk, p)
		}
	}

	var rs []PartitionRelease
	for _, f := range fs {
		rs = append(rs, PartitionRelease{Key: f.Key, Epoch: f.Flush.Epoch})
	}
	if errs := s.ReleaseMany(ctx, rs[:0]); len(errs) != 0 {
		t.Fatalf("ReleaseMany of nothing = %v", errs)
	}
	if err := s.Release(ctx, rs[3].Key, rs[3].Epoch); err != nil {
		t.Fatalf("warm-up Release: %v", err)
	}
	rec.reset()
	errs = s.ReleaseMany(ctx, rs)
	if rec.roundTrips() != 1 {
		t.Errorf("ReleaseMany made %d round trips (%v); want 1 pipeline", rec.roundTrips(), rec.commands())
	}
	if errs[0] != nil || !errors.Is(errs[1], ErrFenced) || !errors.Is(errs[2], ErrStateLost) {
		t.Errorf("ReleaseMany errors = %v; want nil, fenced, lost, ...", errs)
	}
	if st, _ := s.Load(ctx, []PartitionKey{fs[0].Key}); st[fs[0].Key].Owner != "" {
		t.Errorf("owner after ReleaseMany = %q; want none", st[fs[0].Key].Owner)
	}
}

// A server that forgot the scripts (a restart, SCRIPT FLUSH, a failover)
// answers NOSCRIPT to the pipelined EVALSHA; the Store loads them again
// and the writes are made.
func TestFlushManyLoadsScriptsAgainAfterNoScript(t *testing.T) {
	ctx := context.Background()
	s, rdb, _ := newStore(t, Config{})
	c := mustClaim(t, s, pkA, "node-a", 1)
	if err := s.Flush(ctx, pkA, Flush{Epoch: c.Epoch, Watermark: 1, Committed: -1}); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	errs := s.FlushMany(ctx, []PartitionFlush{{Key: pkA, Flush: Flush{Epoch: c.Epoch, Watermark: 7, Committed: -1}}})
	if errs[0] != nil {
		t.Fatalf("FlushMany after SCRIPT FLUSH: %v", errs[0])
	}
	if st, _ := s.Load(ctx, []PartitionKey{pkA}); st[pkA].Watermark != 7 {
		t.Errorf("watermark = %d; want 7", st[pkA].Watermark)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, pkA, c.Epoch); err != nil {
		t.Fatalf("Release after SCRIPT FLUSH: %v", err)
	}
}

// An invalid key fails its own element only; the others are written.
func TestFlushManyRejectsAnInvalidKeyAlone(t *testing.T) {
	ctx := context.Background()
	s, _, _ := newStore(t, Config{})
	c := mustClaim(t, s, pkA, "node-a", 1)
	bad := PartitionKey{Subscription: "a{b}", Topic: "orders"}
	errs := s.FlushMany(ctx, []PartitionFlush{{Key: bad, Flush: Flush{Epoch: 1}}, {Key: pkA, Flush: Flush{Epoch: c.Epoch, Committed: -1}}})
	if !errors.Is(errs[0], errInvalidKey) || errs[1] != nil {
		t.Errorf("errors = %v; want invalid key, nil", errs)
	}
}

// On Redis Cluster the partitions' keys live in different slots, on
// different nodes: one FlushMany still writes them all, and loads the
// scripts again on every node that forgot them.
func TestFlushManyOnRedisClusterSpansNodes(t *testing.T) {
	ctx := context.Background()
	s, rdb := newClusterStore(t)
	var fs []PartitionFlush
	var rs []PartitionRelease
	for p := range int32(16) {
		pk := PartitionKey{Subscription: "sub-1", Topic: "orders", Partition: p}
		c := mustClaim(t, s, pk, "node-a", 1)
		fs = append(fs, PartitionFlush{Key: pk, Flush: Flush{Epoch: c.Epoch, Watermark: int64(p), Committed: -1}})
		rs = append(rs, PartitionRelease{Key: pk, Epoch: c.Epoch})
	}
	for round := range 2 {
		for i, err := range s.FlushMany(ctx, fs) {
			if err != nil {
				t.Fatalf("round %d: FlushMany partition %d: %v", round, i, err)
			}
		}
		// Every node forgets the scripts: the next round meets NOSCRIPT.
		if err := rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return c.ScriptFlush(ctx).Err()
		}); err != nil {
			t.Fatal(err)
		}
	}
	for i, err := range s.ReleaseMany(ctx, rs) {
		if err != nil {
			t.Fatalf("ReleaseMany partition %d: %v", i, err)
		}
	}
	var pks []PartitionKey
	for _, f := range fs {
		pks = append(pks, f.Key)
	}
	st, err := s.Load(ctx, pks)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if p := st[f.Key]; p.Watermark != f.Flush.Watermark || p.Owner != "" {
			t.Errorf("%s stored watermark %d owner %q; want %d, released", f.Key, p.Watermark, p.Owner, f.Flush.Watermark)
		}
	}
}

// newClusterStore returns a Store on a 3-node Redis Cluster of its own,
// and the cluster client it uses.
func newClusterStore(t *testing.T) (*Store, *redis.ClusterClient) {
	t.Helper()
	cluster := testutil.StartRedisCluster(t, 3)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs})
	t.Cleanup(func() { _ = rdb.Close() })
	s, err := New(rdb, Config{})
	if err != nil {
		t.Fatal(err)
	}
	return s, rdb
}

// claimShapes leaves sub's partitions 0–3 in the shapes a claim meets:
// no state; a whole claim of node-b's with acked offsets; a live claim of
// a newer generation; two sharers' claims with different acked offsets
// (a union the claim must store afterwards).
func claimShapes(t *testing.T, s *Store, sub string) []PartitionKey {
	t.Helper()
	ctx := context.Background()
	pks := make([]PartitionKey, 4)
	for p := range pks {
		pks[p] = PartitionKey{Subscription: sub, Topic: "orders", Partition: int32(p)}
	}
	b := mustClaim(t, s, pks[1], "node-b", 1)
	if err := s.Flush(ctx, pks[1], Flush{Epoch: b.Epoch, Acked: setOf(offsets.Range{Start: 12, End: 14}), Watermark: 10, Committed: 9}); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, s, pks[2], "node-b", 5)
	lo := mustClaimRanges(t, s, pks[3], "node-b", 1, lower)
	hi := mustClaimRanges(t, s, pks[3], "node-c", 1, upper)
	if err := s.Flush(ctx, pks[3], Flush{Epoch: lo.Epoch, Ranges: lower, Acked: setOf(offsets.Range{Start: 20, End: 22}), Watermark: 15, Committed: -1}); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx, pks[3], Flush{Epoch: hi.Epoch, Ranges: upper, Acked: setOf(offsets.Range{Start: 30, End: 31}), Watermark: 15, Committed: -1}); err != nil {
		t.Fatal(err)
	}
	return pks
}

// ClaimMany makes its claims in one pipeline (and one more for the
// unions of sharers' acked offsets it stores), and answers and stores
// exactly what ClaimRanges one at a time would: a new owner restarting
// with thousands of partitions claims them all at the cost of a few round
// trips. A fenced or invalid claim fails alone.
func TestClaimManyIsOnePipelineAndClaimsAsClaimRangesWould(t *testing.T) {
	ctx := context.Background()
	s, rdb, _ := newStore(t, Config{})
	one := claimShapes(t, s, "sub-one")
	many := claimShapes(t, s, "sub-many")

	var want []ClaimResult
	for _, pk := range one {
		c, err := s.ClaimRanges(ctx, pk, "node-a", 2, "", nil)
		want = append(want, ClaimResult{Claim: c, Err: err})
	}
	cs := []PartitionClaim{{Key: PartitionKey{Subscription: "bad{", Topic: "orders"}, Owner: "node-a", Generation: 2}}
	for _, pk := range many {
		cs = append(cs, PartitionClaim{Key: pk, Owner: "node-a", Generation: 2})
	}
	rec := &recorder{}
	rdb.AddHook(rec)
	got := s.ClaimMany(ctx, cs)
	if rec.pipelines != 2 || rec.roundTrips() != 2 {
		t.Errorf("ClaimMany of %d claims made %d round trips in %d pipelines (%v); want 2: the claims, then the union's store", len(cs), rec.roundTrips(), rec.pipelines, rec.commands())
	}
	if got[0].Err == nil {
		t.Errorf("the claim of an invalid key answered no error")
	}
	got = got[1:]
	for i := range want {
		if (want[i].Err == nil) != (got[i].Err == nil) || (want[i].Err != nil && errors.Is(want[i].Err, ErrFenced) != errors.Is(got[i].Err, ErrFenced)) {
			t.Fatalf("partition %d: ClaimMany answered %v, ClaimRanges %v", i, got[i].Err, want[i].Err)
		}
		// Epochs are the server's clock in microseconds: each claim's own.
		a, b := want[i].Claim, got[i].Claim
		a.Epoch, b.Epoch = 0, 0
		if diff := cmp.Diff(a, b, cmp.Comparer(func(a, b *offsets.Set) bool {
			return (a == nil) == (b == nil) && (a == nil || a.String() == b.String())
		})); diff != "" {
			t.Errorf("partition %d: ClaimMany's claim differs from ClaimRanges' (-one +many):\n%s", i, diff)
		}
		sa, sb := storedAs(t, s, rdb, one[i]), storedAs(t, s, rdb, many[i])
		if diff := cmp.Diff(sa, sb); diff != "" {
			t.Errorf("partition %d: ClaimMany stored other fields than ClaimRanges (-one +many):\n%s", i, diff)
		}
	}
	if !errors.Is(got[2].Err, ErrFenced) {
		t.Errorf("the claim under a live newer generation answered %v; want ErrFenced", got[2].Err)
	}
	if !got[1].Claim.Acked.Contains(13) || got[1].Claim.PrevOwner != "node-b" {
		t.Errorf("the takeover answered %+v; want node-b's acked offsets", got[1].Claim)
	}
	if a := got[3].Claim.Acked; !a.Contains(21) || !a.Contains(30) {
		t.Errorf("the claim over two sharers answered acked %v; want both sharers' offsets", a)
	}
	if st := load(t, s, many[3]); !st.Acked.Contains(21) || !st.Acked.Contains(30) {
		t.Errorf("the claim over two sharers stored acked %v; want the union", st.Acked)
	}
}

// storedAs is pk's stored HASH with its epoch (the server's clock when
// claimed) written "EPOCH" and the times the server stamps left out, to
// compare two partitions' states.
func storedAs(t *testing.T, s *Store, rdb *redis.Client, pk PartitionKey) map[string]string {
	t.Helper()
	h := stored(t, s, rdb, pk)
	e := h["epoch"]
	out := map[string]string{}
	for f, v := range h {
		if strings.HasSuffix(f, ":"+fieldUpdated) || strings.HasSuffix(f, ":claimed") {
			continue
		}
		out[strings.ReplaceAll(f, e, "EPOCH")] = strings.ReplaceAll(v, e, "EPOCH")
	}
	return out
}
