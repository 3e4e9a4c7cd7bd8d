package partition

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// stuck builds a machine where key "s" holds the watermark at offset 0
// (dispatched, never answered) while keys "a".."c" and "s" keep coming.
// A key parks what comes beyond ParkAfter once the window is full and
// nothing is ready to send, or beyond its refill cap (a tenth of the
// window, at least four times ParkAfter): the tests use small windows.
func stuckPartition(t *testing.T, parkAfter int, window int64) (*Machine[string], *Entry[string]) {
	t.Helper()
	m := newMachine(t, Config{MaxWindow: window, ParkAfter: parkAfter, ParkedBytes: 8})
	m.Claim(nil)
	m.Offer(recs("0:s"))
	head := drainReady(t, m)
	if len(head) != 1 {
		t.Fatalf("dispatched %v", offsetsOf(head))
	}
	return m, head[0]
}

func TestStuckKeyParksAndOtherKeysKeepFlowingPastTheWindow(t *testing.T) {
	m, _ := stuckPartition(t, 2, 10)
	// 100 offsets: every fourth is the stuck key's, the rest three others.
	// They arrive four at a time; the other keys' records are acked as
	// they go, while the stuck key parks.
	for o := 1; o <= 100; o += 4 {
		var specs []string
		for k := o; k < o+4 && k <= 100; k++ {
			specs = append(specs, itoa(k)+":"+[]string{"s", "a", "b", "c"}[k%4])
		}
		m.Offer(recs(specs...))
		for _, e := range drainReady(t, m) {
			m.Done(e, true)
		}
	}
	if m.Backlog() != 0 || m.Paused() {
		t.Fatalf("backlog %d, paused %v: other keys stopped behind the stuck one", m.Backlog(), m.Paused())
	}
	if got := m.Next(); got != 101 {
		t.Fatalf("fetch position %d, want 101: the window stopped the fetch", got)
	}
	// "s" holds at most its refill cap in memory (max(4×2, 10/10) = 8,
	// its head among them); the rest of its 26 records are parked.
	if got := len(m.pending); got > 8 || m.Parked() != int64(26-got) {
		t.Fatalf("%d records in memory, %d parked; want at most 8 in memory, the rest of 26 parked", got, m.Parked())
	}
	if got := m.Pending(); got != 26 {
		t.Fatalf("pending %d, want 26", got)
	}
	if m.Watermark() != 0 {
		t.Fatalf("watermark %d, want 0", m.Watermark())
	}
	if m.Reread() != -1 {
		t.Fatalf("reread from %d while the stuck key has no room", m.Reread())
	}
}

func TestParkedRecordsComeBackInOrderWhenTheKeyFreesUp(t *testing.T) {
	m, head := stuckPartition(t, 2, 3)
	m.Offer(recs("1:s", "2:a", "3:s", "4:s", "5:b", "6:s", "7:s"))
	for range 2 {
		for _, e := range drainReady(t, m) {
			m.Done(e, true) // a, then b
		}
	}
	if got := m.Parked(); got != 4 {
		t.Fatalf("parked %d, want 4 (3, 4, 6, 7)", got)
	}
	if key, _, ok := m.HoldingParked(); ok {
		t.Fatalf("watermark's record reported parked (key %q) while it is in memory", key)
	}
	m.Done(head, true)
	// Offset 1 goes; the key has room for its parked ones from offset 3.
	one := drainReady(t, m)
	if diff := cmp.Diff([]int64{1}, offsetsOf(one)); diff != "" {
		t.Fatalf("after the head (-want +got):\n%s", diff)
	}
	if got := m.Reread(); got != 3 {
		t.Fatalf("reread from %d, want 3", got)
	}
	// A fetch made again from an earlier position, repeated and with a
	// record out of turn: only the next parked ones are taken, in turn.
	if got := m.Unpark(recs("0:s", "2:a", "4:s", "3:s", "3:s", "4:s", "5:b", "6:s")); got != 2 {
		t.Fatalf("took %d, want 2 (3 and 4: the first 4 came before 3; then the window of 3 is full)", got)
	}
	m.Done(one[0], true)
	if got := m.Unpark(recs("4:s", "5:b", "6:s", "7:s")); got != 1 {
		t.Fatalf("took %d, want 1 (6, filling the window again)", got)
	}
	var order []int64
	for range 10 {
		out := drainReady(t, m)
		for _, e := range out {
			order = append(order, e.Offset)
			if e.Payload != itoa(int(e.Offset))+":s" {
				t.Fatalf("offset %d carries %q", e.Offset, e.Payload)
			}
			m.Done(e, true)
		}
		if from := m.Reread(); from >= 0 {
			m.Unpark(recs("6:s", "7:s"))
		}
	}
	if diff := cmp.Diff([]int64{3, 4, 6, 7}, order); diff != "" {
		t.Fatalf("order of the parked records (-want +got):\n%s", diff)
	}
	if m.Parked() != 0 || m.Pending() != 0 || m.Watermark() != 8 {
		t.Fatalf("parked %d, pending %d, watermark %d; want 0, 0, 8", m.Parked(), m.Pending(), m.Watermark())
	}
}

func TestWatermarkHeldByAParkedRecordNamesItsKey(t *testing.T) {
	m, head := stuckPartition(t, 1, 1)
	m.Offer(recs("1:s", "2:s"))
	m.Done(head, true)
	// 1 and 2 were parked (the key held its head); now nothing of "s" is
	// in memory and the watermark waits for parked offset 1.
	key, _, ok := m.HoldingParked()
	if !ok || key != "s" || m.Watermark() != 1 {
		t.Fatalf("holding parked: %q %v, watermark %d; want \"s\", true, 1", key, ok, m.Watermark())
	}
	if m.OldestParked().IsZero() {
		t.Fatal("no oldest parked time")
	}
}

func TestInjectedRecordBehindParkedOnesWaitsForThem(t *testing.T) {
	m, head := stuckPartition(t, 1, 1)
	m.Offer(recs("1:s"))
	x := m.Inject([]byte("s"), "redrive")
	m.Offer(recs("2:s"))
	if m.PeekExtra() != nil {
		t.Fatal("injected record ready while the key has parked records before it")
	}
	m.Done(head, true)
	m.Unpark(recs("1:s"))
	one := drainReady(t, m)
	if diff := cmp.Diff([]int64{1}, offsetsOf(one)); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	m.Done(one[0], true)
	if m.PeekExtra() != x {
		t.Fatal("injected record not ready once the parked record before it was acked")
	}
	if err := m.DispatchExtra(x); err != nil {
		t.Fatal(err)
	}
	m.Unpark(recs("2:s"))
	if out := drainReady(t, m); len(out) != 0 {
		t.Fatalf("%v dispatched while the injected record before it is out", offsetsOf(out))
	}
	m.Done(x, true)
	if diff := cmp.Diff([]int64{2}, offsetsOf(drainReady(t, m))); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

func TestParkBudgetBoundsParkedRecords(t *testing.T) {
	b, _ := NewMemoryBudget(3 * 8)
	m := newMachine(t, Config{MaxWindow: 1, ParkAfter: 1, ParkedBytes: 8, ParkBudget: b})
	m.Claim(nil)
	m.Offer(recs("0:s", "1:s", "2:s", "3:s", "4:s", "5:a"))
	drainReady(t, m)
	if m.Parked() != 3 || m.Backlog() != 2 || !m.Paused() {
		t.Fatalf("parked %d, backlog %d, paused %v; want 3, 2, true", m.Parked(), m.Backlog(), m.Paused())
	}
	m.Close()
	if b.Used() != 0 {
		t.Fatalf("park budget holds %d after Close", b.Used())
	}
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

func TestExpiringRecordsGoOutOfTheirKeysTurn(t *testing.T) {
	m, head := stuckPartition(t, 2, 5)
	t0 := time.Unix(1_700_000_000, 0)
	rs := recs("1:s", "2:s", "3:s", "4:s", "5:a")
	for i := range rs {
		rs[i].Time = t0.Add(time.Duration(i) * time.Second)
	}
	m.Offer(rs)
	// 1..4 fill the window; 2, 3 and 4 are parked to make room for 5
	// (key a), which goes; 1 waits behind the head.
	for _, e := range drainReady(t, m) {
		m.Done(e, true)
	}
	if m.Parked() != 3 {
		t.Fatalf("parked %d, want 3", m.Parked())
	}
	// Records older than t0+1.5s are about to be deleted: 1 (in memory)
	// and the parked 2.
	if n := m.Expire(t0.Add(1500*time.Millisecond), 100); n != 2 {
		t.Fatalf("expire found %d, want 2 (1, and parked 2)", n)
	}
	out := drainReady(t, m)
	if diff := cmp.Diff([]int64{1}, offsetsOf(out)); diff != "" {
		t.Fatalf("records going out of turn (-want +got):\n%s", diff)
	}
	if !out[0].Expiring() {
		t.Error("offset 1 not marked expiring")
	}
	if head.Expiring() {
		t.Error("the head, read with no timestamp, marked expiring")
	}
	// The parked 2 is read again at once although the key is busy, and
	// goes out of turn; 3 and 4 come back in turn, behind the head.
	if got := m.Reread(); got != 2 {
		t.Fatalf("reread from %d, want 2", got)
	}
	if took := m.Unpark(recs("2:s", "3:s", "4:s")); took != 3 {
		t.Fatalf("took %d, want 3", took)
	}
	out = drainReady(t, m)
	if diff := cmp.Diff([]int64{2}, offsetsOf(out)); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if !out[0].Expiring() {
		t.Error("offset 2 not marked expiring")
	}
	m.Done(head, true)
	if diff := cmp.Diff([]int64{3}, offsetsOf(drainReady(t, m))); diff != "" {
		t.Fatalf("after the head (-want +got):\n%s", diff)
	}
}

func TestParkedRecordsBelowTheLogStartAreCountedLost(t *testing.T) {
	m, head := stuckPartition(t, 1, 2)
	m.Offer(recs("1:s", "2:s", "3:s", "4:a"))
	for _, e := range drainReady(t, m) {
		m.Done(e, true) // 4
	}
	if lost := m.ParkedLostBelow(3); lost != 2 {
		t.Fatalf("lost %d, want 2 (1 and 2, parked below the log start 3)", lost)
	}
	m.Done(head, true)
	if m.Watermark() != 3 || m.Parked() != 1 {
		t.Fatalf("watermark %d, parked %d; want 3 and 1", m.Watermark(), m.Parked())
	}
}

func TestConflationDeliversOnlyAKeysNewestRecordWhenItFreesUp(t *testing.T) {
	m := newMachine(t, Config{Conflate: true, ParkAfter: 2})
	m.Claim(nil)
	m.Offer(recs("0:k", "1:k", "2:j", "3:k", "4:k", "5:j"))
	out := drainReady(t, m)
	if diff := cmp.Diff([]int64{0, 2}, offsetsOf(out)); diff != "" {
		t.Fatalf("first out (-want +got):\n%s", diff)
	}
	// 1 and 3 were superseded by 4 (k), none of j (its 5 is the only one
	// waiting).
	if got := m.Superseded(); got != 2 {
		t.Fatalf("superseded %d, want 2", got)
	}
	for _, e := range out {
		m.Done(e, true)
	}
	if diff := cmp.Diff([]int64{4, 5}, offsetsOf(drainReady(t, m))); diff != "" {
		t.Fatalf("after the heads (-want +got):\n%s", diff)
	}
	if m.Parked() != 0 {
		t.Fatalf("%d parked: a conflating key never parks", m.Parked())
	}
	// The superseded ones count as acked: only 4 and 5 hold the watermark.
	if m.Watermark() != 4 {
		t.Fatalf("watermark %d, want 4", m.Watermark())
	}
}

func TestRereadAfterKeepsAPassGoingWhileAKeyHasRoom(t *testing.T) {
	m, head := stuckPartition(t, 2, 10) // refill cap max(4×2, 10/10) = 8
	var specs []string
	for o := 1; o <= 30; o++ {
		specs = append(specs, itoa(o)+":s")
	}
	m.Offer(recs(specs...))
	if m.Parked() != 23 {
		t.Fatalf("parked %d, want 23 (8..30: the key holds its refill cap, 0..7)", m.Parked())
	}
	m.Done(head, true)
	var last *Entry[string]
	for range 6 { // 1..6 go; 7 is left in memory
		out := drainReady(t, m)
		last = out[0]
		if m.Reread() != -1 {
			t.Fatalf("reread from %d while the key holds %d records", m.Reread(), 8-last.Offset)
		}
		m.Done(last, true)
	}
	seven := drainReady(t, m)
	if m.Reread() != 8 {
		t.Fatalf("reread from %d, want 8", m.Reread())
	}
	m.Unpark(recs("8:s", "9:s", "10:s"))
	// Above half its ParkAfter (1) in memory: no new pass would start, but
	// one that reached 11 goes on, up to the refill cap.
	if got := m.Reread(); got != -1 {
		t.Fatalf("reread from %d, want -1 (the key holds 4, over half of 2)", got)
	}
	if got := m.RereadAfter(11); got != 11 {
		t.Fatalf("reread after 11: %d, want 11", got)
	}
	if got := m.RereadAfter(12); got != -1 {
		t.Fatalf("reread after 12: %d, want -1 (the key wants 11, behind)", got)
	}
	m.Unpark(recs("11:s", "12:s", "13:s", "14:s", "15:s"))
	if got := m.RereadAfter(15); got != -1 {
		t.Fatalf("reread after 15: %d, want -1 (the key holds its refill cap)", got)
	}
	m.Done(seven[0], true)
}

// A node that is merely behind keeps its keys' records in memory: while
// records are ready to send, a full window pauses the fetch and nothing
// is parked, so nothing is read twice.
func TestFullWindowWithRecordsReadyPausesWithoutParking(t *testing.T) {
	m2 := newMachine(t, Config{MaxWindow: 10, ParkAfter: 2})
	m2.Claim(nil)
	var specs []string
	for o := range 30 {
		specs = append(specs, itoa(o)+":"+[]string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"}[o%12])
	}
	m2.Offer(recs(specs...))
	// 10 records of 10 keys in memory, every one of them ready: the fetch
	// pauses, nothing parks.
	if m2.Parked() != 0 || !m2.Paused() || m2.Backlog() != 20 {
		t.Fatalf("parked %d, paused %v, backlog %d; want 0, true, 20", m2.Parked(), m2.Paused(), m2.Backlog())
	}
	out := drainReady(t, m2)
	if len(out) != 10 {
		t.Fatalf("dispatched %d, want 10", len(out))
	}
	// All ten are out now: nothing ready, and no key holds more than
	// ParkAfter, so there is nothing to park either: the fetch waits.
	if m2.Parked() != 0 || m2.Backlog() != 20 {
		t.Fatalf("parked %d, backlog %d; want 0 and 20", m2.Parked(), m2.Backlog())
	}
	for _, e := range out {
		m2.Done(e, true)
	}
	if m2.Parked() != 0 || m2.Backlog() != 10 {
		t.Fatalf("parked %d, backlog %d after the acks; want 0 and 10", m2.Parked(), m2.Backlog())
	}
}

// A stuck key whose records fill the window while nothing else is ready
// parks its tail (down to ParkAfter) the moment another key's record
// arrives, and that record goes.
func TestStarvedFullWindowParksTheLongKeysTail(t *testing.T) {
	m, head := stuckPartition(t, 2, 10) // refill cap max(4×2, 10/10) = 8
	m.Offer(recs("1:s", "2:s", "3:s", "4:s", "5:s", "6:s", "7:s", "8:b", "9:b"))
	if m.Parked() != 0 || len(m.pending) != 10 {
		t.Fatalf("parked %d, in memory %d; want 0 and 10", m.Parked(), len(m.pending))
	}
	b := drainReady(t, m) // 8; then nothing is ready
	m.Offer(recs("10:a"))
	a := drainReady(t, m)
	if diff := cmp.Diff([]int64{10}, offsetsOf(a)); diff != "" {
		t.Fatalf("dispatched (-want +got):\n%s", diff)
	}
	// s keeps its head and one more in memory; 2..7 are parked, before
	// anything it parks later, and come back first. b holds no more than
	// ParkAfter: it keeps its records.
	if m.Parked() != 6 || m.Evicted() != 6 || len(m.pending) != 5 {
		t.Fatalf("parked %d (from memory %d), in memory %d; want 6, 6, 5", m.Parked(), m.Evicted(), len(m.pending))
	}
	m.Offer(recs("11:s"))
	for _, e := range append(a, b...) {
		m.Done(e, true)
	}
	m.Done(head, true)
	// Oldest first: s's 1 before b's 9, though 9 became ready first.
	if diff := cmp.Diff([]int64{1, 9}, offsetsOf(drainReady(t, m))); diff != "" {
		t.Fatalf("after the head (-want +got):\n%s", diff)
	}
	if got := m.Reread(); got != 2 {
		t.Fatalf("reread from %d, want 2", got)
	}
	if took := m.Unpark(recs("2:s", "3:s", "4:s", "5:s", "6:s", "7:s", "11:s")); took != 7 {
		t.Fatalf("took %d back, want 7 (2..7, then 11)", took)
	}
}
