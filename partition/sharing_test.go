package partition

import (
	"fmt"
	"testing"
	"time"

	"github.com/keyhook/keyhook/keyrange"
	"github.com/keyhook/keyhook/tracking/offsets"
)

var (
	lower = keyrange.Range{Lo: 0, Hi: keyrange.Space / 2}
	upper = keyrange.Range{Lo: keyrange.Space / 2, Hi: keyrange.Space}
)

// keyIn returns the i-th key whose hash is in r.
func keyIn(r keyrange.Range, i int) string {
	for n := 0; ; n++ {
		k := fmt.Sprintf("key-%d", n)
		if r.Contains(keyrange.Of([]byte(k), 0)) {
			if i == 0 {
				return k
			}
			i--
		}
	}
}

func TestSharedPartitionDeliversOnlyItsRangeAndAcksNothingElse(t *testing.T) {
	m := newMachine(t, Config{})
	m.SetCommitted(0)
	m.ClaimRanges(nil, keyrange.Set{lower}, nil)
	mine, theirs := keyIn(lower, 0), keyIn(upper, 0)
	m.Offer(recs("0:"+mine, "1:"+theirs, "2:"+theirs, "3:"+mine))
	out := drainReady(t, m)
	if got := offsetsOf(out); len(got) != 1 || got[0] != 0 {
		t.Fatalf("dispatched %v; want only 0 (its lane's head; 1 and 2 are another sharer's)", got)
	}
	m.Done(out[0], true)
	out = drainReady(t, m)
	if got := offsetsOf(out); len(got) != 1 || got[0] != 3 {
		t.Fatalf("dispatched %v; want 3", got)
	}
	m.Done(out[0], true)
	if wm := m.Watermark(); wm != 4 {
		t.Errorf("watermark %d; want 4 (another sharer's records count as done here)", wm)
	}
	s := m.Snapshot()
	if s.Acked.Contains(1) || s.Acked.Contains(2) {
		t.Errorf("flushed acked set %v holds another sharer's records: a new owner would skip them", s.Acked)
	}
	if !s.Ranges.Equal(keyrange.Set{lower}) {
		t.Errorf("snapshot ranges %v; want %v", s.Ranges, keyrange.Set{lower})
	}
	if m.Foreign() != 2 {
		t.Errorf("Foreign() = %d; want 2", m.Foreign())
	}
}

func TestFloorsSkipWhatAPreviousOwnerDelivered(t *testing.T) {
	m := newMachine(t, Config{})
	m.SetCommitted(0)
	a, b := keyIn(lower, 0), keyIn(upper, 0)
	// The previous owner of the upper range delivered everything below 3.
	m.ClaimRanges(nil, nil, []Floor{{Range: upper, Below: 3}, {Range: lower, Below: 1}})
	m.Offer(recs("0:"+a, "1:"+b, "2:"+a, "3:"+b))
	var got []int64
	for range 4 {
		out := drainReady(t, m)
		for _, e := range out {
			got = append(got, e.Offset)
			m.Done(e, true)
		}
	}
	if fmt.Sprint(got) != "[2 3]" {
		t.Errorf("delivered %v; want [2 3] (0 and 1 are below their range's floor)", got)
	}
	if !m.Snapshot().Acked.Contains(1) {
		t.Error("a record below its floor is not in the acked set: it is a fact worth keeping")
	}
}

func TestFreezeDrainsARangeThenShrinkLetsItGo(t *testing.T) {
	budget, _ := NewMemoryBudget(1 << 20)
	m := newMachine(t, Config{Budget: budget})
	m.SetCommitted(0)
	m.Claim(nil)
	a, b := keyIn(lower, 0), keyIn(upper, 0)
	rs := recs("0:"+b, "1:"+a, "2:"+b, "3:"+a)
	for i := range rs {
		rs[i].Bytes = 100
	}
	m.Offer(rs)
	out := drainReady(t, m) // 0 (b) and 1 (a) go out
	if len(out) != 2 {
		t.Fatalf("dispatched %v", offsetsOf(out))
	}
	m.Freeze(keyrange.Set{lower}) // give up b's range
	if m.Draining() != 1 {
		t.Fatalf("Draining() = %d; want 1 (offset 0 is in flight)", m.Draining())
	}
	if _, err := m.Shrink(); err == nil {
		t.Fatal("Shrink succeeded with a record of the range in flight")
	}
	m.Done(out[0], true) // 0 answered: 2 (b) must not go
	m.Done(out[1], true) // 1 answered: 3 (a) goes
	if got := offsetsOf(drainReady(t, m)); fmt.Sprint(got) != "[3]" {
		t.Fatalf("dispatched %v after the freeze; want [3]", got)
	}
	// The state flushed before the release holds 2 as not acked.
	if s := m.Snapshot(); s.Watermark != 2 || s.Acked.Contains(2) {
		t.Fatalf("snapshot before the release: watermark %d, acked %v; want watermark 2 without 2", s.Watermark, s.Acked)
	}
	if _, err := m.Shrink(); err != nil {
		t.Fatal(err)
	}
	if !m.Ranges().Equal(keyrange.Set{lower}) {
		t.Errorf("ranges %v after shrink", m.Ranges())
	}
	if m.Pending() != 1 || budget.Used() != 100 {
		t.Errorf("pending %d, budget used %d; want 1 and 100 (2 let go, 3 in flight)", m.Pending(), budget.Used())
	}
	if s := m.Snapshot(); s.Acked.Contains(2) || m.Watermark() != 3 {
		t.Errorf("after shrink: watermark %d, acked %v; want 3 and 2 never acked", m.Watermark(), s.Acked)
	}
}

func TestFreezingLessTakesBackTheKeptRange(t *testing.T) {
	m := newMachine(t, Config{})
	m.SetCommitted(0)
	m.Claim(nil)
	b := keyIn(upper, 0)
	m.Offer(recs("0:" + b))
	m.Freeze(keyrange.Set{lower})
	if m.Peek() != nil {
		t.Fatal("a record of a frozen range is ready")
	}
	m.Freeze(keyrange.Full())
	if e := m.Peek(); e == nil || e.Offset != 0 {
		t.Fatalf("Peek() = %v after the freeze was taken back; want offset 0", e)
	}
}

func TestSharedPartitionCommitsOnlyTheMergedWatermark(t *testing.T) {
	m := newMachine(t, Config{})
	m.SetCommitted(0)
	m.ClaimRanges(new(offsets.Set), keyrange.Set{lower}, nil)
	m.Offer(recs("0:"+keyIn(upper, 0), "1:"+keyIn(upper, 1)))
	s := m.Snapshot()
	if s.Watermark != 2 {
		t.Fatalf("own watermark %d; want 2", s.Watermark)
	}
	m.FlushedMerged(s, -1)
	if c, ok := m.CommitCandidate(); ok {
		t.Fatalf("commit candidate %d with the merged watermark unknown", c)
	}
	m.FlushedMerged(s, 1)
	if c, ok := m.CommitCandidate(); !ok || c != 1 {
		t.Fatalf("commit candidate %d, %v; want the merged 1, not its own 2", c, ok)
	}
	// A whole partition commits the higher of its own and the merged one.
	w := newMachine(t, Config{})
	w.SetCommitted(0)
	w.Claim(nil)
	w.Offer(recs("0:!"))
	w.FlushedMerged(w.Snapshot(), 5)
	if c, _ := w.CommitCandidate(); c != 5 {
		t.Errorf("whole partition: candidate %d; want 5", c)
	}
}

func TestExpiringRecordOutOfItsLaneKeepsItsKeysRange(t *testing.T) {
	m := newMachine(t, Config{})
	m.SetCommitted(0)
	m.Claim(nil)
	k := keyIn(upper, 0)
	t0 := time.Unix(1_700_000_000, 0)
	rs := recs("0:"+k, "1:"+k)
	for i := range rs {
		rs[i].Time = t0
	}
	m.Offer(rs)
	head := m.Peek()
	if err := m.Dispatch(head); err != nil {
		t.Fatal(err)
	}
	// 1 leaves its lane, expiring, while the partition is whole; then
	// its key's range is given up.
	if n := m.Expire(t0.Add(time.Second), 10); n != 2 {
		t.Fatalf("expire found %d, want 2", n)
	}
	m.Freeze(keyrange.Set{lower})
	if e := m.Peek(); e != nil {
		t.Fatalf("offset %d of the range given up is ready: it left its lane, but its key is still in the range", e.Offset)
	}
	m.Done(head, true)
	if _, err := m.Shrink(); err != nil {
		t.Fatal(err)
	}
	if wm := m.Watermark(); wm != 2 {
		t.Errorf("watermark %d, want 2: 1 is the next owner's", wm)
	}
}
