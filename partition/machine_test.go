package partition

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keyhook/keyhook/tracking/offsets"
)

func newMachine(t *testing.T, cfg Config) *Machine[string] {
	t.Helper()
	if cfg.MaxWindow == 0 {
		cfg.MaxWindow = 100
	}
	m, err := New[string](cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// recs builds records from "offset:key" specs; key "-" is none, "!" a
// transaction marker.
func recs(specs ...string) []Record[string] {
	var out []Record[string]
	for _, s := range specs {
		var off int64
		i := 0
		for ; i < len(s) && s[i] != ':'; i++ {
			off = off*10 + int64(s[i]-'0')
		}
		key := s[i+1:]
		r := Record[string]{Offset: off, Payload: s, Size: 10}
		switch key {
		case "-":
		case "!":
			r.Control = true
		default:
			r.Key = []byte(key)
		}
		out = append(out, r)
	}
	return out
}

// drainReady dispatches everything Peek offers and returns the offsets.
func drainReady(t *testing.T, m *Machine[string]) []*Entry[string] {
	t.Helper()
	var out []*Entry[string]
	for e := m.Peek(); e != nil; e = m.Peek() {
		if err := m.Dispatch(e); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

func offsetsOf(es []*Entry[string]) []int64 {
	out := []int64{}
	for _, e := range es {
		out = append(out, e.Offset)
	}
	return out
}

func TestConfigValidateNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "partition: MaxWindow 0 must be positive"},
		{Config{MaxWindow: 1, Ordering: 7}, "partition: Ordering 7 is unknown"},
		{Config{MaxWindow: 1, Batch: Batch{MaxRecords: -1}}, "partition: Batch.MaxRecords -1 must not be negative"},
		{Config{MaxWindow: 1, Batch: Batch{MaxWait: -time.Second}}, "partition: Batch.MaxWait -1s must not be negative"},
	} {
		if _, err := New[string](tc.cfg); err == nil || err.Error() != tc.want {
			t.Errorf("New(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

func TestOrderingDecidesWhatGoesOutTogether(t *testing.T) {
	in := []string{"0:a", "1:a", "2:b", "3:-", "4:b", "5:c"}
	for _, tc := range []struct {
		ordering Ordering
		first    []int64 // dispatched at once
		afterAck []int64 // dispatched once the first wave is acked
	}{
		{OrderKey, []int64{0, 2, 3, 5}, []int64{1, 4}},
		{OrderPartition, []int64{0}, []int64{1}},
		{OrderNone, []int64{0, 1, 2, 3, 4, 5}, []int64{}},
	} {
		m := newMachine(t, Config{Ordering: tc.ordering})
		m.Claim(nil)
		m.Offer(recs(in...))
		first := drainReady(t, m)
		if diff := cmp.Diff(tc.first, offsetsOf(first)); diff != "" {
			t.Errorf("ordering %d, first wave (-want +got):\n%s", tc.ordering, diff)
		}
		for _, e := range first {
			m.Done(e, true)
		}
		if diff := cmp.Diff(tc.afterAck, offsetsOf(drainReady(t, m))); diff != "" {
			t.Errorf("ordering %d, after the acks (-want +got):\n%s", tc.ordering, diff)
		}
	}
}

func TestAbortedRecordStaysPendingAndHoldsItsKey(t *testing.T) {
	m := newMachine(t, Config{})
	m.Claim(nil)
	m.Offer(recs("0:a", "1:a"))
	e := drainReady(t, m)[0]
	m.Stop()
	m.Done(e, false)
	if m.Pending() != 2 || m.Watermark() != 0 || m.Peek() != nil {
		t.Fatalf("pending %d watermark %d peek %v; want 2, 0, nil", m.Pending(), m.Watermark(), m.Peek())
	}
}

func TestGapsAndMarkersCountAsAcked(t *testing.T) {
	m := newMachine(t, Config{})
	m.SetCommitted(10)
	m.Claim(nil)
	// 10..11 compacted away, 12 a record, 13 a marker, 14..16 aborted data.
	m.Offer(recs("12:a", "13:!", "17:b"))
	out := drainReady(t, m)
	if diff := cmp.Diff([]int64{12, 17}, offsetsOf(out)); diff != "" {
		t.Fatalf("dispatched (-want +got):\n%s", diff)
	}
	if m.Watermark() != 12 {
		t.Fatalf("watermark %d, want 12 (the gap below the first record is acked)", m.Watermark())
	}
	m.Done(out[0], true)
	if m.Watermark() != 17 {
		t.Fatalf("watermark %d, want 17 (marker and aborted offsets do not stall it)", m.Watermark())
	}
	m.Done(out[1], true)
	if m.Watermark() != 18 || m.Next() != 18 {
		t.Fatalf("watermark %d next %d, want 18 18", m.Watermark(), m.Next())
	}
}

func TestClaimSkipsWhatAPreviousOwnerAcked(t *testing.T) {
	m := newMachine(t, Config{})
	m.SetCommitted(100)
	m.Offer(recs("100:a", "101:b", "102:a", "103:c"))
	if m.Pending() != 0 || !m.Paused() || m.Peek() != nil {
		t.Fatal("records accepted, fetch resumed or dispatch offered before the claim")
	}
	var acked offsets.Set
	acked.AddOffset(100)
	acked.AddOffset(103)
	m.Claim(&acked)
	if m.Paused() {
		t.Fatal("still paused after the claim")
	}
	if diff := cmp.Diff([]int64{101, 102}, offsetsOf(drainReady(t, m))); diff != "" {
		t.Fatalf("dispatched (-want +got):\n%s", diff)
	}
}

func TestRefetchedRecordsAreIgnored(t *testing.T) {
	m := newMachine(t, Config{Ordering: OrderNone})
	m.Claim(nil)
	m.Offer(recs("0:a", "1:b"))
	drainReady(t, m)
	m.Offer(recs("0:a", "1:b", "2:c"))
	if diff := cmp.Diff([]int64{2}, offsetsOf(drainReady(t, m))); diff != "" {
		t.Fatalf("dispatched after a refetch (-want +got):\n%s", diff)
	}
}

func TestWindowPausesAtMaxAndResumesAtHalf(t *testing.T) {
	m := newMachine(t, Config{Ordering: OrderNone, MaxWindow: 4})
	m.Claim(nil)
	m.Offer(recs("0:a", "1:b", "2:c", "3:d", "4:e", "5:f"))
	if m.Pending() != 4 || m.Backlog() != 2 || !m.Paused() {
		t.Fatalf("pending %d backlog %d paused %v; want 4, 2, true", m.Pending(), m.Backlog(), m.Paused())
	}
	out := drainReady(t, m)
	m.Done(out[0], true) // window 1..5 after accepting 4: full again
	if m.Pending() != 4 || m.Backlog() != 1 || !m.Paused() {
		t.Fatalf("after one ack: pending %d backlog %d paused %v; want 4, 1, true", m.Pending(), m.Backlog(), m.Paused())
	}
	out = append(out, drainReady(t, m)...)
	m.Done(out[1], true) // accepts 5: window 2..6, full
	m.Done(out[2], true) // window 3..6: 3 > half, still paused
	if !m.Paused() {
		t.Fatal("resumed above half the window")
	}
	m.Done(out[3], true) // window 4..6: 2 = half, resumes
	if m.Paused() || m.Backlog() != 0 {
		t.Fatalf("paused %v backlog %d at half the window; want false 0", m.Paused(), m.Backlog())
	}
}

func TestCommitFollowsTheFlushNeverTheLiveWatermark(t *testing.T) {
	m := newMachine(t, Config{Ordering: OrderNone})
	m.SetCommitted(5)
	m.Claim(nil)
	m.Offer(recs("5:a", "6:b", "7:c"))
	out := drainReady(t, m)
	m.Done(out[0], true)
	m.Done(out[1], true)
	if _, ok := m.CommitCandidate(); ok {
		t.Fatal("commit candidate before any flush")
	}
	s := m.Snapshot()
	m.Done(out[2], true) // acked after the snapshot was taken
	m.Flushed(s)
	if c, ok := m.CommitCandidate(); !ok || c != 7 {
		t.Fatalf("candidate %d %v, want 7 (the flushed watermark, not the live 8)", c, ok)
	}
	if !m.Dirty() {
		t.Fatal("an ack after the snapshot is not dirty")
	}
	m.SetCommitted(7)
	if _, ok := m.CommitCandidate(); ok {
		t.Fatal("candidate again after committing it")
	}
	m.SetCommitted(6) // a late, older commit
	if m.Committed() != 7 {
		t.Fatalf("commit moved back to %d", m.Committed())
	}
	s = m.Snapshot()
	m.Flushed(s)
	m.Fence()
	if _, ok := m.CommitCandidate(); ok || m.Dirty() {
		t.Fatal("a fenced partition offers a commit or a flush")
	}
}

func TestStopEndsDispatchButNotAcks(t *testing.T) {
	m := newMachine(t, Config{})
	m.Claim(nil)
	m.Offer(recs("0:a", "1:a", "2:b"))
	out := drainReady(t, m)
	m.Stop()
	m.Done(out[0], true)
	if m.Peek() != nil || !m.Paused() {
		t.Fatal("stopped partition offers a record or fetches")
	}
	if m.InFlight() != 1 || m.Watermark() != 1 {
		t.Fatalf("in flight %d watermark %d; want 1 1", m.InFlight(), m.Watermark())
	}
}

func TestBatchAssembly(t *testing.T) {
	now := time.Unix(0, 0)
	clock := func() time.Time { return now }
	for _, tc := range []struct {
		name  string
		batch Batch
		in    []string
		want  [][]int64 // batches in order, each acked before the next
	}{
		{"heads then followers of their lane", Batch{MaxRecords: 10}, []string{"0:a", "1:b", "2:a", "3:a", "4:b"}, [][]int64{{0, 2, 3, 1, 4}}},
		{"record limit", Batch{MaxRecords: 2}, []string{"0:a", "1:b", "2:c"}, [][]int64{{0, 1}, {2}}},
		{"byte limit, at least one", Batch{MaxRecords: 10, MaxBytes: 15}, []string{"0:a", "1:b", "2:c"}, [][]int64{{0}, {1}, {2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine(t, Config{Batch: tc.batch, Clock: clock})
			m.Claim(nil)
			m.Offer(recs(tc.in...))
			for i, want := range tc.want {
				b, wait := m.Assemble()
				if wait != 0 {
					t.Fatalf("batch %d: wait %v", i, wait)
				}
				if diff := cmp.Diff(want, offsetsOf(b)); diff != "" {
					t.Fatalf("batch %d (-want +got):\n%s", i, diff)
				}
				m.DispatchBatch(b)
				for _, e := range b {
					m.Done(e, true)
				}
			}
			if b, _ := m.Assemble(); b != nil {
				t.Fatalf("extra batch %v", offsetsOf(b))
			}
		})
	}
}

func TestBatchWaitsForMoreUntilMaxWait(t *testing.T) {
	now := time.Unix(0, 0)
	m := newMachine(t, Config{Batch: Batch{MaxRecords: 3, MaxWait: 50 * time.Millisecond}, Clock: func() time.Time { return now }})
	m.Claim(nil)
	m.Offer(recs("0:a"))
	now = now.Add(20 * time.Millisecond)
	if b, wait := m.Assemble(); b != nil || wait != 30*time.Millisecond {
		t.Fatalf("assemble = %v, %v; want nil, 30ms", offsetsOf(b), wait)
	}
	m.Offer(recs("1:b", "2:c"))
	if b, _ := m.Assemble(); len(b) != 3 {
		t.Fatalf("a full batch did not go at once: %v", offsetsOf(b))
	}
	m.Offer(recs("3:d"))
	now = now.Add(50 * time.Millisecond)
	if b, _ := m.Assemble(); len(b) != 1 {
		t.Fatalf("a batch that waited MaxWait did not go: %v", offsetsOf(b))
	}
}

func TestBudgetBoundsHeldBytesAcrossPartitions(t *testing.T) {
	budget, err := NewMemoryBudget(30)
	if err != nil {
		t.Fatal(err)
	}
	withBytes := func(rs []Record[string]) []Record[string] {
		for i := range rs {
			rs[i].Bytes = 10
		}
		return rs
	}
	a := newMachine(t, Config{Ordering: OrderNone, Budget: budget})
	b := newMachine(t, Config{Ordering: OrderNone, Budget: budget})
	a.Claim(nil)
	b.Claim(nil)
	a.Offer(withBytes(recs("0:a", "1:b")))
	b.Offer(withBytes(recs("0:a", "1:b")))
	if a.Pending() != 2 || b.Pending() != 1 || b.Backlog() != 1 || !b.Paused() || budget.Used() != 30 {
		t.Fatalf("pending %d/%d backlog b %d paused b %v used %d; want 2/1, 1, true, 30", a.Pending(), b.Pending(), b.Backlog(), b.Paused(), budget.Used())
	}
	out := drainReady(t, a)
	a.Done(out[0], true)
	b.Refill()
	if b.Pending() != 2 || b.Backlog() != 0 || budget.Used() != 30 {
		t.Fatalf("after an ack elsewhere: pending b %d backlog %d used %d; want 2, 0, 30", b.Pending(), b.Backlog(), budget.Used())
	}
	a.Close()
	b.Close()
	if budget.Used() != 0 {
		t.Fatalf("closed machines still hold %d bytes", budget.Used())
	}
}

// A batch assembled waits for a delivery slot while the worker goes on:
// its records are taken, and stay so. The retention guard finding them
// about to be deleted meanwhile does not make one ready again, which would
// send it twice, once in the batch and once on its own.
func TestRecordsTakenIntoABatchStayTakenUntilItGoes(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	m := newMachine(t, Config{Batch: Batch{MaxRecords: 10}, Clock: func() time.Time { return t0 }})
	m.Claim(nil)
	rs := recs("0:a", "1:a", "2:a")
	for i := range rs {
		rs[i].Time = t0.Add(time.Duration(i) * time.Second)
	}
	m.Offer(rs)
	b, _ := m.Assemble()
	if diff := cmp.Diff([]int64{0, 1, 2}, offsetsOf(b)); diff != "" {
		t.Fatalf("batch (-want +got):\n%s", diff)
	}
	if n := m.Expire(t0.Add(time.Hour), 100); n != 3 {
		t.Fatalf("expire found %d, want 3", n)
	}
	if e := m.Peek(); e != nil {
		t.Fatalf("offset %d, taken into the batch, is ready again once found expiring", e.Offset)
	}
	m.DispatchBatch(b)
	for _, e := range b {
		m.Done(e, true)
	}
	if m.Watermark() != 3 || m.InFlight() != 0 || m.Peek() != nil {
		t.Errorf("after the batch: watermark %d, in flight %d, ready %v; want 3, 0, none", m.Watermark(), m.InFlight(), m.Peek())
	}
}
