package partition

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A key that fell behind goes again as soon as it is free, ahead of keys
// whose records are newer: the oldest ready record goes first, not the
// one that became ready first. In readiness order a's 1 would wait behind
// b's 2, c's 3 and d's 4, and every record a has after it would wait a
// whole turn of the queue again.
func TestOldestReadyRecordGoesFirst(t *testing.T) {
	m := newMachine(t, Config{Ordering: OrderKey})
	m.Claim(nil)
	m.Offer(recs("0:a", "1:a", "2:b", "3:c", "4:d", "5:a"))
	first := m.Peek()
	if first == nil || first.Offset != 0 {
		t.Fatalf("first ready %v, want offset 0", first)
	}
	if err := m.Dispatch(first); err != nil {
		t.Fatal(err)
	}
	m.Done(first, true)
	if diff := cmp.Diff([]int64{1, 2, 3, 4}, offsetsOf(drainReady(t, m))); diff != "" {
		t.Fatalf("after a's 0 was acked (-want +got):\n%s", diff)
	}
}

// Dispatch takes only the record Peek offers.
func TestDispatchRefusesAnythingButTheOldestReady(t *testing.T) {
	m := newMachine(t, Config{Ordering: OrderKey})
	m.Claim(nil)
	m.Offer(recs("0:a", "1:b"))
	var second *Entry[string]
	for _, e := range m.pending {
		if e.Offset == 1 {
			second = e
		}
	}
	if err := m.Dispatch(second); err != ErrNotReady {
		t.Fatalf("Dispatch of the newer ready record = %v, want ErrNotReady", err)
	}
	if err := m.Dispatch(nil); err != ErrNotReady {
		t.Fatalf("Dispatch(nil) = %v, want ErrNotReady", err)
	}
}

// FuzzReadyQueue checks the heap against a sorted list under any mix of
// pushes, pops and filters.
func FuzzReadyQueue(f *testing.F) {
	f.Add([]byte{5, 3, 9, 0x80, 1, 0x40, 7, 0x80, 0x80})
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 0x40, 0x80, 0x80, 0x80})
	f.Fuzz(func(t *testing.T, ops []byte) {
		var q readyQueue[string]
		var want []int64
		next := int64(0)
		for _, op := range ops {
			switch {
			case op == 0x80: // pop
				got := q.pop()
				if len(want) == 0 {
					if got != nil {
						t.Fatalf("pop of an empty queue gave %d", got.Offset)
					}
					continue
				}
				if got == nil || got.Offset != want[0] {
					t.Fatalf("pop gave %v, want %d (queue %v)", got, want[0], want)
				}
				want = want[1:]
			case op == 0x40: // drop the odd offsets
				q.filter(func(e *Entry[string]) bool { return e.Offset%2 == 0 })
				want = slices.DeleteFunc(want, func(o int64) bool { return o%2 != 0 })
			default: // push a fresh offset, spread by op
				next++
				o := next*256 + int64(op)
				if op%3 == 0 {
					o = -o // older than everything so far
				}
				q.push(&Entry[string]{Offset: o})
				want = append(want, o)
				slices.Sort(want)
			}
			if q.len() != len(want) {
				t.Fatalf("len %d, want %d", q.len(), len(want))
			}
			if p := q.peek(); len(want) > 0 && (p == nil || p.Offset != want[0]) {
				t.Fatalf("peek %v, want %d", p, want[0])
			}
		}
	})
}
