package tracking

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/keyhook/keyhook/keyrange"
	"github.com/keyhook/keyhook/tracking/offsets"
)

// sharer is a node of the model: what a dispatcher keeps of its claim.
type sharer struct {
	name      string
	gen       int32
	epoch     int64
	ranges    keyrange.Set // nil: no claim
	floors    []Floor
	acked     *offsets.Set
	committed int64
}

// floor is what the claim knows of hash h: records below it were
// delivered.
func (n *sharer) floor(h uint16) int64 {
	for _, f := range n.floors {
		if f.Range.Contains(h) {
			return f.Watermark
		}
	}
	return -1
}

// done reports whether the sharer knows record o (of hash h) delivered.
func (n *sharer) done(o int64, h uint16) bool { return o < n.floor(h) || n.acked.Contains(o) }

// watermark is the lowest record of the sharer's ranges it does not know
// delivered, or the log end.
func (n *sharer) watermark(hashes []uint16) int64 {
	for o, h := range hashes {
		if n.ranges.Contains(h) && !n.done(int64(o), h) {
			return int64(o)
		}
	}
	return int64(len(hashes))
}

// modelWorld is the truth the store's answers are checked against.
type modelWorld struct {
	t         *testing.T
	s         *Store
	rng       *rand.Rand
	hashes    []uint16       // record offset -> key hash
	delivered map[int64]bool // records some sharer delivered
	known     map[int64]bool // records a successful flush reported delivered
	merged    int64          // the highest merged watermark seen
	gen       int32
}

// randomRanges returns one or two ranges cut at multiples of 4096.
func (w *modelWorld) randomRanges() keyrange.Set {
	var rs []keyrange.Range
	for range 1 + w.rng.IntN(2) {
		lo := uint32(w.rng.IntN(16)) * 4096
		hi := lo + uint32(1+w.rng.IntN(16-int(lo/4096)))*4096
		rs = append(rs, keyrange.Range{Lo: lo, Hi: hi})
	}
	s, err := keyrange.NewSet(rs...)
	if err != nil {
		w.t.Fatal(err)
	}
	return s
}

// nextRanges picks what n claims: mostly what no other node holds, as a
// balancer would, sometimes anything (a takeover, a zombie's attempt).
func (w *modelWorld) nextRanges(n *sharer, nodes []*sharer) keyrange.Set {
	free := keyrange.Full()
	for _, o := range nodes {
		if o != n {
			free = free.Minus(o.ranges)
		}
	}
	if free.IsEmpty() || w.rng.IntN(4) == 0 {
		return w.randomRanges()
	}
	return free
}

func (w *modelWorld) claim(n *sharer, rs keyrange.Set) {
	c, err := w.s.ClaimRanges(context.Background(), pkA, n.name, n.gen, "", rs)
	if errors.Is(err, ErrFenced) {
		return
	}
	if err != nil {
		w.t.Fatalf("%s claims %s: %v", n.name, rs, err)
	}
	// Every record a flush reported delivered in these ranges is known to
	// the claim: acked, or below its floor.
	n.epoch, n.ranges, n.floors, n.acked = c.Epoch, rs, c.Floors, c.Acked
	for o := range w.known {
		if h := w.hashes[o]; rs.Contains(h) && !n.done(o, h) {
			w.t.Fatalf("%s claimed %s: record %d (hash %d) was reported delivered, but the claim knows it neither acked nor below its floor %d (floors %v, acked %s)",
				n.name, rs, o, h, n.floor(h), c.Floors, c.Acked)
		}
	}
	covered := keyrange.Set{}
	for _, f := range c.Floors {
		covered = covered.Union(keyrange.Set{f.Range})
	}
	if !covered.Equal(rs) {
		w.t.Fatalf("%s claimed %s: floors %v cover %s", n.name, rs, c.Floors, covered)
	}
}

// deliver makes n deliver records of its ranges it does not know
// delivered, in offset order from its watermark, leaving some behind (a
// slow key) to be acked out of order later; it considers up to k.
func (w *modelWorld) deliver(n *sharer, k int) {
	for o := n.watermark(w.hashes); o < int64(len(w.hashes)) && k > 0; o++ {
		if h := w.hashes[o]; n.ranges.Contains(h) && !n.done(o, h) {
			k--
			if w.rng.IntN(5) > 0 {
				w.delivered[o] = true
				n.acked.AddOffset(o)
			}
		}
	}
}

func (w *modelWorld) flush(n *sharer) bool {
	wm := n.watermark(w.hashes)
	acked := n.acked.Clone()
	acked.TrimBelow(wm)
	r := w.s.FlushRanges(context.Background(), []PartitionFlush{{Key: pkA, Flush: Flush{
		Epoch: n.epoch, Ranges: n.ranges, Acked: acked, Watermark: wm, Fetched: int64(len(w.hashes)), Committed: n.committed}}})[0]
	if errors.Is(r.Err, ErrFenced) {
		n.ranges = nil
		return false
	}
	if r.Err != nil {
		w.t.Fatalf("%s flushes: %v", n.name, r.Err)
	}
	n.acked = acked
	for _, rg := range acked.Ranges() {
		for o := rg.Start; o < rg.End; o++ {
			w.known[o] = true
		}
	}
	for o := range wm {
		if n.ranges.Contains(w.hashes[o]) {
			w.known[o] = true
		}
	}
	// The node commits what the store says every range delivered.
	n.committed = max(n.committed, r.Watermark)
	w.check(fmt.Sprintf("%s flushed", n.name), r.Watermark)
	return true
}

func (w *modelWorld) release(n *sharer) {
	if !w.flush(n) {
		return
	}
	rs := n.ranges.Intersect(w.randomRanges())
	err := w.s.ReleaseRanges(context.Background(), pkA, n.epoch, rs)
	if err != nil {
		w.t.Fatalf("%s releases %s of %s: %v", n.name, rs, n.ranges, err)
	}
	if n.ranges = n.ranges.Minus(rs); n.ranges.IsEmpty() {
		n.ranges = nil
	}
}

// check compares the stored state with the truth.
func (w *modelWorld) check(after string, flushed int64) {
	st := load(w.t, w.s, pkA)
	if flushed > st.Watermark {
		w.t.Fatalf("after %s: the flush answered merged watermark %d, the store holds %d", after, flushed, st.Watermark)
	}
	if st.Watermark < w.merged {
		w.t.Fatalf("after %s: merged watermark went back from %d to %d", after, w.merged, st.Watermark)
	}
	w.merged = st.Watermark
	for o := range st.Watermark {
		if !w.delivered[o] {
			w.t.Fatalf("after %s: merged watermark %d passes record %d (hash %d), never delivered; ranges %+v",
				after, st.Watermark, o, w.hashes[o], st.Ranges)
		}
	}
	if st.Committed > st.Watermark {
		w.t.Fatalf("after %s: commit mirror %d ahead of the merged watermark %d", after, st.Committed, st.Watermark)
	}
	for _, r := range st.Ranges {
		for o := range r.Watermark {
			if h := uint32(w.hashes[o]); h >= r.Lo && h < r.Hi && !w.delivered[o] {
				w.t.Fatalf("after %s: range %d-%d watermark %d passes record %d, never delivered", after, r.Lo, r.Hi, r.Watermark, o)
			}
		}
	}
	for _, rg := range st.AckedRanges {
		for o := rg.Start; o < rg.End; o++ {
			if !w.delivered[o] {
				w.t.Fatalf("after %s: record %d stored as acked, never delivered", after, o)
			}
		}
	}
}

// TestMergedStateNeverPassesAnUndeliveredRecord drives random claims,
// deliveries, flushes, releases and crashes of sharers over records of
// random hashes, and checks after every step that the merged watermark
// (what a commit may reach) and every range's never pass a record nobody
// delivered, never go back, that acked offsets are true, and that a claim
// learns every record a flush reported delivered in its ranges. At the end
// one node claims everything and must bring the merged watermark to the
// log end.
func TestMergedStateNeverPassesAnUndeliveredRecord(t *testing.T) {
	for seed := range uint64(12) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			s, _, _ := newStore(t, Config{})
			w := &modelWorld{t: t, s: s, rng: rand.New(rand.NewPCG(seed, 7)), delivered: map[int64]bool{}, known: map[int64]bool{},
				merged: -1, gen: 1}
			w.hashes = make([]uint16, 500)
			for o := range w.hashes {
				w.hashes[o] = uint16(w.rng.IntN(keyrange.Space))
			}
			nodes := make([]*sharer, 4)
			for i := range nodes {
				nodes[i] = &sharer{name: fmt.Sprint("node-", i), gen: 1, committed: -1, acked: new(offsets.Set)}
			}
			for step := range 300 {
				n := nodes[w.rng.IntN(len(nodes))]
				switch op := w.rng.IntN(10); {
				case n.ranges == nil || op == 0:
					// A rebalance: sometimes a newer generation; a node
					// that still holds ranges drops them (a crash).
					if w.rng.IntN(4) == 0 {
						w.gen++
					}
					if w.rng.IntN(3) > 0 {
						n.gen = w.gen
					}
					w.claim(n, w.nextRanges(n, nodes))
				case op <= 5:
					w.deliver(n, 1+w.rng.IntN(20))
				case op <= 8:
					w.flush(n)
				default:
					w.release(n)
				}
				if step%10 == 0 {
					w.check(fmt.Sprint("step ", step), -1)
				}
			}

			last := &sharer{name: "last", gen: w.gen + 1, committed: -1, acked: new(offsets.Set)}
			w.claim(last, keyrange.Full())
			w.deliver(last, 0)
			for o, h := range w.hashes {
				if !last.done(int64(o), h) {
					w.delivered[int64(o)] = true
					last.acked.AddOffset(int64(o))
				}
			}
			if !w.flush(last) || w.merged != int64(len(w.hashes)) {
				t.Fatalf("after one claim of everything delivered all: merged watermark %d; want %d", w.merged, len(w.hashes))
			}
		})
	}
}
