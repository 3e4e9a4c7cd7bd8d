package tracking

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/keyhook/keyhook/keyrange"
	"github.com/keyhook/keyhook/tracking/offsets"
)

// The halves of the hash space, and a quarter of it.
var (
	lower   = keyrange.Set{{Lo: 0, Hi: 32768}}
	upper   = keyrange.Set{{Lo: 32768, Hi: keyrange.Space}}
	topQuad = keyrange.Set{{Lo: 49152, Hi: keyrange.Space}}
)

func mustClaimRanges(t *testing.T, s *Store, pk PartitionKey, owner string, gen int32, rs keyrange.Set) Claim {
	t.Helper()
	c, err := s.ClaimRanges(context.Background(), pk, owner, gen, "", rs)
	if err != nil {
		t.Fatalf("ClaimRanges(%s, %q, %d, %s): %v", pk, owner, gen, rs, err)
	}
	return c
}

// flushOne flushes f and returns its result, failing the test on an error.
func flushOne(t *testing.T, s *Store, pk PartitionKey, f Flush) FlushResult {
	t.Helper()
	r := s.FlushRanges(context.Background(), []PartitionFlush{{Key: pk, Flush: f}})[0]
	if r.Err != nil {
		t.Fatalf("FlushRanges(%s, epoch %d, %s): %v", pk, f.Epoch, f.Ranges, r.Err)
	}
	return r
}

// pieces returns the stored pieces of pk as "lo-hi:watermark" strings and
// the owners of each, for compact comparisons.
func pieces(t *testing.T, s *Store, pk PartitionKey) (wms, owners []string) {
	t.Helper()
	for _, r := range load(t, s, pk).Ranges {
		wms = append(wms, keyrange.Range{Lo: r.Lo, Hi: r.Hi}.String()+":"+strconv.FormatInt(r.Watermark, 10))
		owners = append(owners, r.Owner)
	}
	return wms, owners
}

func TestSharersOfHalvesMergeToTheLowerWatermark(t *testing.T) {
	s, _, _ := newStore(t, Config{})
	a := mustClaimRanges(t, s, pkA, "node-a", 1, lower)
	b := mustClaimRanges(t, s, pkA, "node-b", 1, upper)
	if diff := cmp.Diff([]Floor{{Range: lower[0], Watermark: -1}}, a.Floors); diff != "" {
		t.Errorf("first claim's floors (-want +got):\n%s", diff)
	}

	// B never flushed: its half knows nothing, the merged watermark too.
	r := flushOne(t, s, pkA, Flush{Epoch: a.Epoch, Ranges: lower, Watermark: 50, Fetched: 60, Committed: -1, Pending: 3})
	if r.Watermark != -1 || r.Committed != -1 {
		t.Errorf("flush while the other half knows nothing = %+v; want watermark -1, committed -1", r)
	}
	r = flushOne(t, s, pkA, Flush{Epoch: b.Epoch, Ranges: upper, Watermark: 80, Fetched: 90, Committed: -1, Pending: 4})
	if r.Watermark != 50 {
		t.Errorf("merged watermark = %d; want 50, the lower half's", r.Watermark)
	}
	r = flushOne(t, s, pkA, Flush{Epoch: a.Epoch, Ranges: lower, Watermark: 120, Fetched: 130, Committed: 50})
	if r.Watermark != 80 || r.Committed != 50 {
		t.Errorf("after the lower half passed the upper = %+v; want watermark 80, committed 50", r)
	}
	// A sharer that reports an older commit does not move the mirror back.
	r = flushOne(t, s, pkA, Flush{Epoch: b.Epoch, Ranges: upper, Watermark: 85, Fetched: 90, Committed: 40, Pending: 4})
	if r.Watermark != 85 || r.Committed != 50 {
		t.Errorf("after an older commit = %+v; want watermark 85, committed 50", r)
	}

	st := load(t, s, pkA)
	if st.Owner != "" || st.Watermark != 85 || st.Fetched != 130 || st.Pending != 4 || st.Committed != 50 {
		t.Errorf("Load = owner %q watermark %d fetched %d pending %d committed %d; want \"\", 85, 130, 4, 50",
			st.Owner, st.Watermark, st.Fetched, st.Pending, st.Committed)
	}
	wms, owners := pieces(t, s, pkA)
	if diff := cmp.Diff([]string{"0-32768:120", "32768-65536:85"}, wms); diff != "" {
		t.Errorf("pieces (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"node-a", "node-b"}, owners); diff != "" {
		t.Errorf("owners (-want +got):\n%s", diff)
	}
}

func TestGracefulShrinkHandsTheUpperHalfOverWithItsAckedSetAndFloor(t *testing.T) {
	ctx := context.Background()
	s, _, _ := newStore(t, Config{})
	a := mustClaim(t, s, pkA, "node-a", 1)
	flushOne(t, s, pkA, Flush{Epoch: a.Epoch, Acked: setOf(offsets.Range{Start: 105, End: 110}), Watermark: 100, Fetched: 110, Committed: 90})

	if err := s.ReleaseRanges(ctx, pkA, a.Epoch, upper); err != nil {
		t.Fatalf("ReleaseRanges(upper): %v", err)
	}
	// The claim now declares its lower half only.
	if err := s.Flush(ctx, pkA, Flush{Epoch: a.Epoch, Watermark: 100, Committed: 90}); !errors.Is(err, ErrFenced) {
		t.Errorf("flush declaring the whole space after a release = %v; want ErrFenced", err)
	}
	// A goes on in its lower half: its watermark passes the offsets it
	// acked in the upper half, and its set no longer holds them.
	flushOne(t, s, pkA, Flush{Epoch: a.Epoch, Ranges: lower, Acked: setOf(), Watermark: 111, Fetched: 111, Committed: 90})
	if _, owners := pieces(t, s, pkA); !cmp.Equal(owners, []string{"node-a", ""}) {
		t.Errorf("owners after the release = %q; want node-a, released", owners)
	}

	b := mustClaimRanges(t, s, pkA, "node-b", 1, upper)
	if b.Acked.String() != "105-109" || b.Committed != 90 || b.PrevOwner != "" {
		t.Errorf("claim of the released half = acked %q committed %d prev %q; want A's acked set at the release 105-109, 90, no previous owner",
			b.Acked, b.Committed, b.PrevOwner)
	}
	if diff := cmp.Diff([]Floor{{Range: upper[0], Watermark: 100}}, b.Floors); diff != "" {
		t.Errorf("floors (-want +got):\n%s", diff)
	}
	// A is not fenced by a claim of what it released.
	if r := flushOne(t, s, pkA, Flush{Epoch: a.Epoch, Ranges: lower, Watermark: 111, Fetched: 111, Committed: 90}); r.Watermark != 100 {
		t.Errorf("merged watermark = %d; want 100, the upper half's floor", r.Watermark)
	}
	if err := s.ReleaseRanges(ctx, pkA, a.Epoch, upper); !errors.Is(err, ErrFenced) {
		t.Errorf("releasing a range the claim no longer holds = %v; want ErrFenced", err)
	}
	if err := s.ReleaseRanges(ctx, pkA, a.Epoch, nil); err != nil {
		t.Errorf("releasing nothing = %v; want nil", err)
	}
}

func TestTakeoverWithoutReleaseFencesTheFormerSharer(t *testing.T) {
	ctx := context.Background()
	s, rdb, _ := newStore(t, Config{})
	a := mustClaimRanges(t, s, pkA, "node-a", 1, lower)
	b := mustClaimRanges(t, s, pkA, "node-b", 1, upper)
	flushOne(t, s, pkA, Flush{Epoch: a.Epoch, Ranges: lower, Acked: setOf(offsets.Range{Start: 20, End: 30}), Watermark: 10, Committed: -1})
	flushOne(t, s, pkA, Flush{Epoch: b.Epoch, Ranges: upper, Acked: setOf(offsets.Range{Start: 40, End: 41}), Watermark: 15, Committed: -1})

	// A dies (kill -9): C takes its half under a newer generation.
	c := mustClaimRanges(t, s, pkA, "node-c", 2, lower)
	if c.PrevOwner != "node-a" || c.Acked.String() != "20-29" {
		t.Errorf("takeover = prev %q acked %q; want node-a, 20-29", c.PrevOwner, c.Acked)
	}
	h := stored(t, s, rdb, pkA)
	for f := range h {
		if strings.HasPrefix(f, claimField(a.Epoch, "")) {
			t.Errorf("field %s of the claim nothing refers to any more is still stored", f)
		}
	}
	before := stored(t, s, rdb, pkA)
	if err := s.Flush(ctx, pkA, Flush{Epoch: a.Epoch, Ranges: lower, Watermark: 1000, Committed: 1000}); !errors.Is(err, ErrFenced) {
		t.Errorf("former sharer's flush = %v; want ErrFenced", err)
	}
	if err := s.Release(ctx, pkA, a.Epoch); !errors.Is(err, ErrFenced) {
		t.Errorf("former sharer's release = %v; want ErrFenced", err)
	}
	if diff := cmp.Diff(before, stored(t, s, rdb, pkA)); diff != "" {
		t.Errorf("fenced calls changed the HASH (-before +after):\n%s", diff)
	}
	// B is untouched.
	if r := flushOne(t, s, pkA, Flush{Epoch: b.Epoch, Ranges: upper, Watermark: 16, Committed: -1}); r.Watermark != 10 {
		t.Errorf("merged watermark = %d; want 10, the lower half's floor", r.Watermark)
	}

	// A sharer that loses part of its ranges is fenced as well.
	mustClaimRanges(t, s, pkA, "node-d", 2, topQuad)
	if err := s.Flush(ctx, pkA, Flush{Epoch: b.Epoch, Ranges: upper, Watermark: 17, Committed: -1}); !errors.Is(err, ErrFenced) {
		t.Errorf("flush of a sharer that lost a quarter = %v; want ErrFenced", err)
	}
	if err := s.ReleaseRanges(ctx, pkA, b.Epoch, keyrange.Set{{Lo: 32768, Hi: 40000}}); !errors.Is(err, ErrFenced) {
		t.Errorf("release by a sharer that lost a quarter = %v; want ErrFenced", err)
	}
}

func TestRangeClaimOfAnOlderGenerationWaitsUntilTheClaimIsStale(t *testing.T) {
	const stale = 30 * time.Second
	tests := []struct {
		name       string
		claimGen   int32
		updatedAgo time.Duration
		wantFenced bool
	}{
		{name: "older generation, fresh claim: refused", claimGen: 6, wantFenced: true},
		{name: "older generation, stale claim: taken", claimGen: 6, updatedAgo: stale + time.Second},
		{name: "same generation, fresh claim: taken", claimGen: 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			s, rdb, _ := newStore(t, Config{StaleClaim: stale})
			old := mustClaimRanges(t, s, pkA, "node-a", 5, lower)
			held := mustClaimRanges(t, s, pkA, "node-b", 7, upper)
			updated := serverNow(t, rdb).Add(-tt.updatedAgo).UnixMilli()
			if err := rdb.HSet(ctx, s.key(pkA), claimField(held.Epoch, fieldUpdated), updated).Err(); err != nil {
				t.Fatal(err)
			}
			before := stored(t, s, rdb, pkA)

			// The claim overlaps both: only the newer generation's piece
			// can refuse it.
			_, err := s.ClaimRanges(ctx, pkA, "zombie", tt.claimGen, "", keyrange.Set{{Lo: 16384, Hi: 49152}})
			if tt.wantFenced {
				if !errors.Is(err, ErrFenced) {
					t.Fatalf("claim = %v; want ErrFenced", err)
				}
				if diff := cmp.Diff(before, stored(t, s, rdb, pkA)); diff != "" {
					t.Errorf("refused claim changed the HASH (-before +after):\n%s", diff)
				}
				for _, c := range []struct {
					epoch int64
					rs    keyrange.Set
				}{{old.Epoch, lower}, {held.Epoch, upper}} {
					if err := s.Flush(ctx, pkA, Flush{Epoch: c.epoch, Ranges: c.rs, Committed: -1}); err != nil {
						t.Errorf("holder's flush after a refused claim: %v", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("claim: %v", err)
			}
			if _, owners := pieces(t, s, pkA); !cmp.Equal(owners, []string{"node-a", "zombie", "node-b"}) {
				t.Errorf("owners = %q; want node-a, zombie, node-b", owners)
			}
		})
	}
}

func TestResplittingTwoSharersIntoThreeKeepsEveryFloor(t *testing.T) {
	ctx := context.Background()
	s, rdb, _ := newStore(t, Config{})
	halves := keyrange.Split(2)
	var claims []Claim
	for i, r := range halves {
		claims = append(claims, mustClaimRanges(t, s, pkA, "node-"+string(rune('a'+i)), 1, keyrange.Set{r}))
	}
	flushOne(t, s, pkA, Flush{Epoch: claims[0].Epoch, Ranges: keyrange.Set{halves[0]}, Acked: setOf(offsets.Range{Start: 300, End: 305}), Watermark: 200, Committed: -1})
	merged := flushOne(t, s, pkA, Flush{Epoch: claims[1].Epoch, Ranges: keyrange.Set{halves[1]}, Acked: setOf(offsets.Range{Start: 310, End: 312}), Watermark: 250, Committed: -1}).Watermark
	for i, r := range halves {
		if err := s.ReleaseRanges(ctx, pkA, claims[i].Epoch, keyrange.Set{r}); err != nil {
			t.Fatalf("release half %d: %v", i, err)
		}
	}

	thirds := keyrange.Split(3)
	wantFloors := [][]Floor{
		{{Range: thirds[0], Watermark: 200}},
		{{Range: keyrange.Range{Lo: thirds[1].Lo, Hi: 32768}, Watermark: 200}, {Range: keyrange.Range{Lo: 32768, Hi: thirds[1].Hi}, Watermark: 250}},
		{{Range: thirds[2], Watermark: 250}},
	}
	wantAcked := []string{"300-304", "300-304,310-311", "310-311"}
	for i, r := range thirds {
		c := mustClaimRanges(t, s, pkA, "node-"+string(rune('x'+i)), 2, keyrange.Set{r})
		if diff := cmp.Diff(wantFloors[i], c.Floors); diff != "" {
			t.Errorf("third %d floors (-want +got):\n%s", i, diff)
		}
		if c.Acked.String() != wantAcked[i] {
			t.Errorf("third %d acked %q; want %q", i, c.Acked, wantAcked[i])
		}
		if st := load(t, s, pkA); st.Watermark < merged {
			t.Errorf("merged watermark went back to %d from %d", st.Watermark, merged)
		}
	}
	st := load(t, s, pkA)
	if st.Watermark != 200 || st.Acked.String() != "300-304,310-311" {
		t.Errorf("after the re-split watermark %d acked %q; want 200, 300-304,310-311", st.Watermark, st.Acked)
	}
	// The middle claim took pieces of two claims, both now deleted: the
	// union of their acked sets is stored for it before it flushes.
	var mid int64
	for _, r := range st.Ranges {
		if r.Owner == "node-y" {
			mid = r.Epoch
		}
	}
	blob, err := rdb.HGet(ctx, s.key(pkA), claimField(mid, fieldAcked)).Result()
	if err != nil {
		t.Fatalf("middle claim's acked field: %v", err)
	}
	var got offsets.Set
	if err := got.UnmarshalBinary([]byte(blob)); err != nil || got.String() != "300-304,310-311" {
		t.Errorf("middle claim's stored acked set %q (%v); want 300-304,310-311", got.String(), err)
	}
	for _, c := range claims {
		if _, err := rdb.HGet(ctx, s.key(pkA), claimField(c.Epoch, fieldOwner)).Result(); err == nil {
			t.Errorf("claim %d is still stored after every piece of it was taken", c.Epoch)
		}
	}
}

func TestRangeFlushAfterRedisLostItsDataReportsStateLost(t *testing.T) {
	ctx := context.Background()
	s, rdb, _ := newStore(t, Config{})
	a := mustClaimRanges(t, s, pkA, "node-a", 1, lower)
	flushOne(t, s, pkA, Flush{Epoch: a.Epoch, Ranges: lower, Watermark: 10, Committed: -1})
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	r := s.FlushRanges(ctx, []PartitionFlush{{Key: pkA, Flush: Flush{Epoch: a.Epoch, Ranges: lower, Watermark: 11, Committed: -1}}})[0]
	if !errors.Is(r.Err, ErrStateLost) || r.Watermark != -1 {
		t.Errorf("flush after the key was lost = %+v; want ErrStateLost, watermark -1", r)
	}
	if err := s.ReleaseRanges(ctx, pkA, a.Epoch, lower); !errors.Is(err, ErrStateLost) {
		t.Errorf("release after the key was lost = %v; want ErrStateLost", err)
	}
	again := mustClaimRanges(t, s, pkA, "node-a", 1, lower)
	if again.Epoch <= a.Epoch || again.Acked.Len() != 0 || again.Committed != -1 {
		t.Errorf("claim after the loss = %+v; want a newer epoch, nothing acked, committed -1", again)
	}
	if diff := cmp.Diff([]Floor{{Range: lower[0], Watermark: -1}}, again.Floors); diff != "" {
		t.Errorf("floors after the loss (-want +got):\n%s", diff)
	}
}

// A HASH written before range claims, one owner at the top, must read as
// one claim of the whole space, and a claim over it must keep its acked
// offsets and watermark: a rolling upgrade loses nothing.
func TestLegacyStateUpgradesWithoutLosingAckedOffsets(t *testing.T) {
	acked := setOf(offsets.Range{Start: 105, End: 110}, offsets.Range{Start: 112, End: 113})
	tests := []struct {
		name      string
		owner     string // "" released
		claim     keyrange.Set
		wantPrev  string
		wantFloor []Floor
	}{
		{"whole space after a crash", "node-old", nil, "node-old", []Floor{{Range: keyrange.Full()[0], Watermark: 100}}},
		{"half after a release", "", upper, "", []Floor{{Range: upper[0], Watermark: 100}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			s, rdb, _ := newStore(t, Config{})
			const epoch = 1_700_000_000_000_000
			if err := rdb.HSet(ctx, s.key(pkA),
				fieldEpoch, epoch, fieldGen, 3, fieldOwner, tt.owner, fieldAcked, acked.AppendBinary(nil),
				fieldWatermark, 100, fieldFetched, 120, fieldCommitted, 98, fieldPending, 13, fieldInFlight, 4,
				fieldKeys, 2, fieldOldest, 0, fieldClaimed, 1_700_000_000_000, fieldUpdated, 1_700_000_000_000,
				fieldTopicID, "id-1").Err(); err != nil {
				t.Fatal(err)
			}
			st := load(t, s, pkA)
			if st.Owner != tt.owner || st.Epoch != epoch || st.Generation != 3 || st.Watermark != 100 || st.Fetched != 120 ||
				st.Committed != 98 || st.Acked.String() != "105-109,112" || len(st.Ranges) != 1 {
				t.Errorf("legacy Load = %+v; want one claim of the whole space with the stored values", st)
			}

			c, err := s.ClaimRanges(ctx, pkA, "node-new", 4, "id-1", tt.claim)
			if err != nil {
				t.Fatalf("claim over the legacy state: %v", err)
			}
			if c.Acked.String() != "105-109,112" || c.Committed != 98 || c.PrevOwner != tt.wantPrev || c.Epoch <= epoch {
				t.Errorf("claim = acked %q committed %d prev %q epoch %d; want 105-109,112, 98, %q, above %d",
					c.Acked, c.Committed, c.PrevOwner, c.Epoch, tt.wantPrev, epoch)
			}
			if diff := cmp.Diff(tt.wantFloor, c.Floors); diff != "" {
				t.Errorf("floors (-want +got):\n%s", diff)
			}
			h := stored(t, s, rdb, pkA)
			for _, f := range []string{fieldGen, fieldOwner, fieldAcked, fieldWatermark} {
				if _, ok := h[f]; ok {
					t.Errorf("legacy field %s still stored after the upgrade", f)
				}
			}
			if st := load(t, s, pkA); st.Acked.String() != "105-109,112" || st.Watermark != 100 {
				t.Errorf("after the upgrade acked %q watermark %d; want 105-109,112, 100", st.Acked, st.Watermark)
			}
		})
	}
}

// Only a claim upgrades the layout before range claims: a flush or a
// release finding it is refused as fenced and writes nothing, whatever
// epoch it presents, since the claim that gave the epoch upgraded the
// HASH and an older node's claim wrote it again since. The claim over it
// upgrades it, and its flushes and release work.
func TestOnlyAClaimUpgradesTheLegacyLayout(t *testing.T) {
	ctx := context.Background()
	s, rdb, _ := newStore(t, Config{})
	const epoch = 1_700_000_000_000_000
	if err := rdb.HSet(ctx, s.key(pkA), fieldEpoch, epoch, fieldGen, 3, fieldOwner, "node-old",
		fieldAcked, setOf(offsets.Range{Start: 7, End: 8}).AppendBinary(nil), fieldWatermark, 5, fieldCommitted, 4,
		fieldUpdated, 1).Err(); err != nil {
		t.Fatal(err)
	}
	before := stored(t, s, rdb, pkA)
	for _, e := range []int64{epoch, epoch - 1} {
		if err := s.Flush(ctx, pkA, Flush{Epoch: e, Watermark: 6, Committed: 5}); !errors.Is(err, ErrFenced) {
			t.Errorf("flush of epoch %d over the legacy layout = %v; want ErrFenced", e, err)
		}
		if err := s.Release(ctx, pkA, e); !errors.Is(err, ErrFenced) {
			t.Errorf("release of epoch %d over the legacy layout = %v; want ErrFenced", e, err)
		}
	}
	if diff := cmp.Diff(before, stored(t, s, rdb, pkA)); diff != "" {
		t.Errorf("legacy HASH changed by refused writes (-before +after):\n%s", diff)
	}

	c := mustClaimRanges(t, s, pkA, "node-new", 4, nil)
	if c.Acked.String() != "7" || c.PrevOwner != "node-old" {
		t.Errorf("claim = acked %q prev %q; want 7, node-old", c.Acked, c.PrevOwner)
	}
	r := flushOne(t, s, pkA, Flush{Epoch: c.Epoch, Acked: setOf(offsets.Range{Start: 7, End: 9}), Watermark: 6, Committed: 5})
	if r.Watermark != 6 || r.Committed != 5 {
		t.Errorf("flush after the upgrade = %+v; want watermark 6, committed 5", r)
	}
	if st := load(t, s, pkA); st.Owner != "node-new" || st.Acked.String() != "7-8" || st.Generation != 4 {
		t.Errorf("Load = %+v; want node-new's claim, acked 7-8, generation 4", st)
	}
	if err := s.Release(ctx, pkA, c.Epoch); err != nil {
		t.Errorf("release after the upgrade: %v", err)
	}
}

// A round of shared partitions (pieces to parse, other claims to keep)
// is one script call too.
func TestFlushRangesWritesManyPartitionsInOneCommand(t *testing.T) {
	ctx := context.Background()
	s, rdb, _ := newStore(t, Config{})
	const n = 6
	var fs []PartitionFlush
	for p := range int32(n) {
		pk := PartitionKey{Subscription: "sub-1", Topic: "orders", Partition: p}
		a := mustClaimRanges(t, s, pk, "node-a", 1, lower)
		b := mustClaimRanges(t, s, pk, "node-b", 1, upper)
		flushOne(t, s, pk, Flush{Epoch: b.Epoch, Ranges: upper, Watermark: 100, Committed: -1})
		fs = append(fs, PartitionFlush{Key: pk, Flush: Flush{Epoch: a.Epoch, Ranges: lower, Watermark: int64(10 * p), Committed: int64(p) - 1}})
	}
	// The first round loads the round's script; every later one is one
	// EVALSHA.
	for _, r := range s.FlushRanges(ctx, fs[:2]) {
		if r.Err != nil {
			t.Fatalf("warm-up round: %v", r.Err)
		}
	}
	rec := &recorder{}
	rdb.AddHook(rec)
	res := s.FlushRanges(ctx, fs)
	if cmds := rec.commands(); rec.roundTrips() != 1 || len(cmds) != 1 || cmds[0][0] != "evalsha" {
		t.Errorf("FlushRanges of %d partitions sent %v in %d round trips; want 1 EVALSHA", n, cmds, rec.roundTrips())
	}
	for p, r := range res {
		if r.Err != nil || r.Watermark != int64(10*p) || r.Committed != int64(p)-1 {
			t.Errorf("partition %d: %+v; want watermark %d, committed %d", p, r, 10*p, p-1)
		}
	}
}

func TestClaimRangesRefusesInvalidRanges(t *testing.T) {
	ctx := context.Background()
	s, rdb, _ := newStore(t, Config{})
	if _, err := s.ClaimRanges(ctx, pkA, "node-a", 1, "", keyrange.Set{{Lo: 5, Hi: 5}}); err == nil {
		t.Error("claim of an empty range succeeded")
	}
	if _, err := s.ClaimRanges(ctx, pkA, "node-a", 1, "", keyrange.Set{{Lo: 0, Hi: keyrange.Space + 1}}); err == nil {
		t.Error("claim beyond the hash space succeeded")
	}
	if n, err := rdb.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Errorf("DBSIZE = %d, %v; want 0", n, err)
	}
	// Unsorted, overlapping ranges are normalised.
	c, err := s.ClaimRanges(ctx, pkA, "node-a", 1, "", keyrange.Set{{Lo: 100, Hi: 200}, {Lo: 0, Hi: 150}})
	if err != nil {
		t.Fatal(err)
	}
	flushOne(t, s, pkA, Flush{Epoch: c.Epoch, Ranges: keyrange.Set{{Lo: 0, Hi: 200}}, Committed: -1})
}

// A recreated topic's claim drops the offsets of every sharer and every
// piece, not only of those it takes.
func TestClaimOfAnotherTopicIDDropsEverySharersOffsets(t *testing.T) {
	ctx := context.Background()
	s, _, _ := newStore(t, Config{})
	a, err := s.ClaimRanges(ctx, pkA, "node-a", 1, "id-1", lower)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.ClaimRanges(ctx, pkA, "node-b", 1, "id-1", upper)
	if err != nil {
		t.Fatal(err)
	}
	flushOne(t, s, pkA, Flush{Epoch: a.Epoch, Ranges: lower, Acked: setOf(offsets.Range{Start: 20, End: 25}), Watermark: 10, Fetched: 25, Committed: 9})
	flushOne(t, s, pkA, Flush{Epoch: b.Epoch, Ranges: upper, Acked: setOf(offsets.Range{Start: 30, End: 31}), Watermark: 12, Fetched: 31, Committed: 9})

	c, err := s.ClaimRanges(ctx, pkA, "node-c", 2, "id-2", topQuad)
	if err != nil {
		t.Fatal(err)
	}
	if c.DiscardedTopicID != "id-1" || c.Acked.Len() != 0 || c.Committed != -1 {
		t.Errorf("claim = %+v; want id-1 discarded, nothing acked, committed -1", c)
	}
	if diff := cmp.Diff([]Floor{{Range: topQuad[0], Watermark: -1}}, c.Floors); diff != "" {
		t.Errorf("floors (-want +got):\n%s", diff)
	}
	st := load(t, s, pkA)
	if st.Watermark != -1 || st.Acked.Len() != 0 || st.Fetched != 0 || st.Committed != -1 || st.TopicID != "id-2" {
		t.Errorf("state after the discarding claim = %+v; want no offsets left, topic id-2", st)
	}
	wms, owners := pieces(t, s, pkA)
	if diff := cmp.Diff([]string{"0-32768:-1", "32768-49152:-1", "49152-65536:-1"}, wms); diff != "" {
		t.Errorf("pieces (-want +got):\n%s", diff)
	}
	if !cmp.Equal(owners, []string{"node-a", "node-b", "node-c"}) {
		t.Errorf("owners = %q; want node-a, node-b, node-c", owners)
	}
}

func TestRangeStateJSONShape(t *testing.T) {
	r := RangeState{Lo: 0, Hi: 32768, Owner: "node-a", Epoch: 7, Generation: 2, Watermark: -1, Fetched: 5, Pending: 1, InFlight: 1, Keys: 1,
		Updated: time.UnixMilli(1_700_000_000_000).UTC()}
	b, err := json.Marshal(PartitionState{Committed: -1, AckedRanges: []offsets.Range{}, Ranges: []RangeState{r}})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Ranges []map[string]any `json:"ranges"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := []map[string]any{{"lo": 0.0, "hi": 32768.0, "owner": "node-a", "epoch": 7.0, "generation": 2.0, "watermark": -1.0,
		"fetched": 5.0, "pending": 1.0, "in_flight": 1.0, "keys": 1.0, "updated": "2023-11-14T22:13:20Z"}}
	if diff := cmp.Diff(want, got.Ranges); diff != "" {
		t.Errorf("JSON ranges (-want +got):\n%s", diff)
	}
}

// During a rolling upgrade a node still running the old code may claim a
// partition shared by new ones: its claim writes the old layout's fields
// at the top of the HASH, which takes the whole space. The sharers are
// fenced, what they knew stays as the floor, and the next new claim
// learns what the old node acked.
func TestOldNodesClaimOverSharedRangesFencesTheSharers(t *testing.T) {
	ctx := context.Background()
	s, rdb, _ := newStore(t, Config{})
	a := mustClaimRanges(t, s, pkA, "node-a", 1, lower)
	b := mustClaimRanges(t, s, pkA, "node-b", 1, upper)
	flushOne(t, s, pkA, Flush{Epoch: a.Epoch, Ranges: lower, Watermark: 50, Committed: 40})
	flushOne(t, s, pkA, Flush{Epoch: b.Epoch, Ranges: upper, Watermark: 80, Committed: 40})

	// What the old claim script writes, then the old flush script.
	old := b.Epoch + 1
	now := serverNow(t, rdb).UnixMilli()
	if err := rdb.HSet(ctx, s.key(pkA), fieldEpoch, old, fieldGen, 2, fieldOwner, "node-old", fieldCommitted, 40,
		fieldClaimed, now, fieldUpdated, now).Err(); err != nil {
		t.Fatal(err)
	}
	if st := load(t, s, pkA); st.Owner != "node-old" || st.Watermark != 50 || len(st.Ranges) != 1 {
		t.Errorf("after the old claim: %+v; want node-old holding everything from watermark 50", st)
	}
	if err := s.Flush(ctx, pkA, Flush{Epoch: a.Epoch, Ranges: lower, Watermark: 60, Committed: 40}); !errors.Is(err, ErrFenced) {
		t.Errorf("sharer's flush after the old claim = %v; want ErrFenced", err)
	}
	if err := rdb.HSet(ctx, s.key(pkA), fieldAcked, setOf(offsets.Range{Start: 70, End: 72}).AppendBinary(nil),
		fieldWatermark, 60, fieldFetched, 72).Err(); err != nil {
		t.Fatal(err)
	}

	c := mustClaimRanges(t, s, pkA, "node-c", 3, nil)
	if c.Acked.String() != "70-71" || c.PrevOwner != "node-old" || c.Committed != 40 {
		t.Errorf("claim after the old node = acked %q prev %q committed %d; want 70-71, node-old, 40", c.Acked, c.PrevOwner, c.Committed)
	}
	if diff := cmp.Diff([]Floor{{Range: keyrange.Full()[0], Watermark: 60}}, c.Floors); diff != "" {
		t.Errorf("floors (-want +got):\n%s", diff)
	}
	h := stored(t, s, rdb, pkA)
	for f := range h {
		if strings.HasPrefix(f, claimPrefix) && !strings.HasPrefix(f, claimField(c.Epoch, "")) {
			t.Errorf("field %s of a claim nothing refers to is still stored", f)
		}
	}
}

// An old claim that never flushed has no watermark, only the commit
// mirror its claim copied: the commit is what is known of every hash.
func TestLegacyClaimWithoutAWatermarkFloorsAtTheCommit(t *testing.T) {
	ctx := context.Background()
	s, rdb, _ := newStore(t, Config{})
	if err := rdb.HSet(ctx, s.key(pkA), fieldEpoch, 1_700_000_000_000_000, fieldGen, 3, fieldOwner, "node-old",
		fieldCommitted, 98, fieldClaimed, 1, fieldUpdated, 1).Err(); err != nil {
		t.Fatal(err)
	}
	if st := load(t, s, pkA); st.Watermark != 98 {
		t.Errorf("legacy Load watermark %d; want 98, the commit", st.Watermark)
	}
	c := mustClaimRanges(t, s, pkA, "node-new", 4, lower)
	if diff := cmp.Diff([]Floor{{Range: lower[0], Watermark: 98}}, c.Floors); diff != "" {
		t.Errorf("floors (-want +got):\n%s", diff)
	}
}
