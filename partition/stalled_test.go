package partition

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// stalledView is what a test compares of a Stalled.
type stalledView struct {
	Key            string
	Offset         int64
	Queued         int
	Parked         int64
	HeadIsAtOffset bool
}

func viewStalled(ss []Stalled[string]) []stalledView {
	out := []stalledView{}
	for _, s := range ss {
		out = append(out, stalledView{Key: s.Key, Offset: s.Offset, Queued: s.Queued, Parked: s.Parked,
			HeadIsAtOffset: s.Head != nil && s.Head.Offset == s.Offset})
	}
	return out
}

func TestStalledListsSlowRetryingAndWaitingKeysNotFlowingOnes(t *testing.T) {
	now := time.Unix(1000, 0)
	m := newMachine(t, Config{Clock: func() time.Time { return now }})
	m.Claim(nil)
	// At t=1000: "slow" and "retry" go out; "behind" goes out and its
	// next record waits behind it.
	m.Offer(recs("0:slow", "1:retry", "2:behind", "3:behind"))
	out := drainReady(t, m)
	if len(out) != 3 {
		t.Fatalf("dispatched %v", offsetsOf(out))
	}
	// Two seconds later: "fast" goes out and is answered at once, "young"
	// goes out and stays out, "ready" waits for a slot.
	now = now.Add(2 * time.Second)
	m.Offer(recs("4:fast", "5:young", "6:ready"))
	if e := m.Peek(); e == nil || e.Offset != 4 {
		t.Fatalf("peek %v, want offset 4", e)
	}
	for range 2 {
		if err := m.Dispatch(m.Peek()); err != nil {
			t.Fatal(err)
		}
	}
	m.Done(m.pending[4], true)

	version := m.version
	retrying := func(e *Entry[string]) bool { return e.Offset == 1 }
	// Slow means out since t=1001 or before: offsets 0 and 2 went out at
	// 1000, offset 3 was read then; 5 went out at 1002.
	got, total := m.Stalled(10, now.Add(-time.Second), retrying)
	want := []stalledView{
		{Key: "slow", Offset: 0, Queued: 1, HeadIsAtOffset: true},
		{Key: "retry", Offset: 1, Queued: 1, HeadIsAtOffset: true},
		{Key: "behind", Offset: 2, Queued: 2, HeadIsAtOffset: true},
	}
	if diff := cmp.Diff(want, viewStalled(got)); diff != "" || total != 3 {
		t.Fatalf("Stalled (-want +got):\n%s\ntotal %d, want 3", diff, total)
	}
	if m.version != version {
		t.Fatal("Stalled changed the machine's version")
	}

	// Retrying lists a key whose head went out a moment ago.
	got, total = m.Stalled(10, now.Add(-time.Hour), func(e *Entry[string]) bool { return e.Offset == 5 })
	if diff := cmp.Diff([]stalledView{{Key: "young", Offset: 5, Queued: 1, HeadIsAtOffset: true}}, viewStalled(got)); diff != "" || total != 1 {
		t.Fatalf("Stalled with 5 retrying (-want +got):\n%s\ntotal %d, want 1", diff, total)
	}

	// A limit keeps the lowest offsets and still counts them all.
	got, total = m.Stalled(2, now.Add(-time.Second), retrying)
	if diff := cmp.Diff(want[:2], viewStalled(got)); diff != "" || total != 3 {
		t.Fatalf("Stalled limited to 2 (-want +got):\n%s\ntotal %d, want 3", diff, total)
	}
}

func TestStalledListsAKeyWithParkedRecordsAndCountsThem(t *testing.T) {
	m, head := stuckPartition(t, 2, 10)
	for o := 1; o <= 40; o += 4 {
		var specs []string
		for k := o; k < o+4; k++ {
			specs = append(specs, itoa(k)+":"+[]string{"s", "a", "b", "c"}[k%4])
		}
		m.Offer(recs(specs...))
		for _, e := range drainReady(t, m) {
			m.Done(e, true)
		}
	}
	if m.Parked() == 0 {
		t.Fatal("nothing parked: the scenario does not park")
	}
	// Nothing is slow and nothing retrying: the parked key alone shows.
	got, total := m.Stalled(10, head.Dispatched.Add(-time.Hour), func(*Entry[string]) bool { return false })
	want := []stalledView{{Key: "s", Offset: 0, Queued: len(m.lanes["s"].q), Parked: m.Parked(), HeadIsAtOffset: true}}
	if diff := cmp.Diff(want, viewStalled(got)); diff != "" || total != 1 {
		t.Fatalf("Stalled (-want +got):\n%s\ntotal %d, want 1", diff, total)
	}
	if got[0].Head != head {
		t.Fatal("the listed head is not the stuck record")
	}
}

func TestStalledListsAKeyWhoseRecordsAreAllParked(t *testing.T) {
	m, head := stuckPartition(t, 2, 10)
	for o := 1; o <= 40; o += 4 {
		var specs []string
		for k := o; k < o+4; k++ {
			specs = append(specs, itoa(k)+":"+[]string{"s", "a", "b", "c"}[k%4])
		}
		m.Offer(recs(specs...))
		for _, e := range drainReady(t, m) {
			m.Done(e, true)
		}
	}
	// The stuck key's records in memory are delivered; the parked ones
	// wait to be read again.
	m.Done(head, true)
	for i := 0; len(m.lanes["s"].q) > 0; i++ {
		if i > 100 {
			t.Fatalf("the stuck key's %d records in memory are never ready", len(m.lanes["s"].q))
		}
		for _, e := range drainReady(t, m) {
			m.Done(e, true)
		}
	}
	got, total := m.Stalled(10, time.Time{}, func(*Entry[string]) bool { return false })
	if total != 1 || len(got) != 1 || got[0].Head != nil || got[0].Queued != 0 || got[0].Parked != m.Parked() || got[0].Offset != m.Watermark() {
		t.Fatalf("Stalled = %+v (total %d), want the key %q with its %d parked records from the watermark %d, no head",
			viewStalled(got), total, "s", m.Parked(), m.Watermark())
	}
}

// BenchmarkStalledOverAFullWindow measures one build of the list over
// the default window of 10,000 records of distinct keys, 256 out: the
// dispatcher builds it at most once a second per partition.
func BenchmarkStalledOverAFullWindow(b *testing.B) {
	now := time.Unix(1000, 0)
	m, err := New[string](Config{MaxWindow: 10000, Clock: func() time.Time { return now }})
	if err != nil {
		b.Fatal(err)
	}
	m.Claim(nil)
	rs := make([]Record[string], 10000)
	for i := range rs {
		rs[i] = Record[string]{Offset: int64(i), Key: []byte("key-" + itoa(i)), Size: 10}
	}
	m.Offer(rs)
	for range 256 {
		if err := m.Dispatch(m.Peek()); err != nil {
			b.Fatal(err)
		}
	}
	slow := now.Add(time.Second) // every record out counts as slow
	none := func(*Entry[string]) bool { return false }
	b.ReportAllocs()
	for b.Loop() {
		if _, total := m.Stalled(100, slow, none); total != 256 {
			b.Fatalf("total %d, want 256", total)
		}
	}
}
