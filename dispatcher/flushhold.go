package dispatcher

import "time"

// flushHoldFor bounds how long a partition's write waits for the answers
// of the records it sent (flushHold).
const flushHoldFor = 250 * time.Millisecond

// flushHold holds back the tracking write of a partition whose state
// changed only by records offered and sent since its last write, while
// their answers are due: a new owner needs none of that (it reads from
// the watermark and skips what is acked), and the answer, due moments
// later, is written with it in one write instead of two. With a thousand
// subscriptions each partition machine sees about one record at a time,
// so this halves the node's tracking writes. The hold ends at the first
// answer, when nothing is pending, or after flushHoldFor; what must be written
// at once (the lease running low, the membership unconfirmed, progress
// notes, a refused renewal) is not held (worker.flush). Owned by the
// worker's loop.
type flushHold struct {
	// answered is set when an answer came since the last write.
	answered bool
	// until is when the held write is due; zero when none is held.
	until time.Time
}

// answer records that a delivery's answer changed the state.
func (h *flushHold) answer() { h.answered = true }

// hold reports whether a write of the changed state waits at now, with
// pending records accepted and not answered (about to be sent, or out);
// the first hold starts the clock.
func (h *flushHold) hold(now time.Time, pending int) bool {
	if h.answered || pending == 0 {
		return false
	}
	if h.until.IsZero() {
		h.until = now.Add(flushHoldFor)
	}
	return now.Before(h.until)
}

// wrote records that the state went to the flusher: nothing is held.
func (h *flushHold) wrote() { *h = flushHold{} }

// due is when the held write is due, zero when none is held.
func (h *flushHold) due() time.Time { return h.until }
