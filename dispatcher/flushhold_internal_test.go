package dispatcher

import (
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
