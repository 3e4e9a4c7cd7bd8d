package dispatcher

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/partition"
	"testing"
	"time"
)

// The hold waits only while records are out and none answered, for at
// most flushHoldFor from the first hold, and a write clears it.
func TestFlushHoldWaitsForAnswersOnly(t *testing.T) {
	now := time.Unix(1000, 0)
	var h flushHold
	if h.hold(now, 0) {
		t.Fatal("held with nothing out")
	}
	if !h.due().IsZero() {
		t.Fatal("a hold due with nothing held")
	}
	if !h.hold(now, 1) {
		t.Fatal("not held with a record out and no answer")
	}
	if got := h.due(); !got.Equal(now.Add(flushHoldFor)) {
		t.Fatalf("due %v, want %v", got, now.Add(flushHoldFor))
	}
	if !h.hold(now.Add(flushHoldFor-time.Millisecond), 1) {
		t.Fatal("not held before the hold's end")
	}
	if h.hold(now.Add(flushHoldFor), 1) {
		t.Fatal("held past flushHoldFor")
	}
	h.wrote()
	if !h.due().IsZero() || !h.hold(now.Add(time.Hour), 3) {
		t.Fatal("a write did not start a new hold")
	}
	h.answer()
	if h.hold(now.Add(time.Hour), 3) {
		t.Fatal("held after an answer")
	}
	h.wrote()
	if !h.hold(now, 1) {
		t.Fatal("the answer outlived the write")
	}
}

// A held write never holds one that must go at once: with a record out
// and no answer, the partition's write waits while its membership is
// confirmed, and goes at the next turn once it is not, so that a new
// owner's claim fences the attempts here within a round (worker.flush).
func TestAHeldWriteGoesAtOnceWhenTheMembershipIsUnconfirmed(t *testing.T) {
	w := leasedWorker(t, 4*time.Second)
	w.g.log = discard
	w.log = discard
	w.g.n.flusher = newFlusher(nil, time.Hour, discard)
	w.epoch = 1 // as a claim sets it
	w.m.Offer([]partition.Record[*kgo.Record]{{Offset: 0, Key: []byte("k"), Payload: &kgo.Record{}}})

	w.flush()
	if w.flushing {
		t.Fatal("the write of a record accepted and not answered went at once; want it held for the answer")
	}
	w.g.live.until.Store(0) // the coordinator's confirmation ran out
	w.flush()
	if !w.flushing {
		t.Fatal("with the membership unconfirmed the write was held; want it written at once")
	}
}
