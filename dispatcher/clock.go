package dispatcher

import "time"

// The worker's clock. Its loop wakes for events (records, results, the
// tracker's answers) and, besides them, only when something is due: one
// timer, armed for the earliest of what the partition waits for. A
// partition with nothing to do sleeps; before, each one woke at every
// flush interval, and a node's idle partitions spent most of its idle
// CPU on those ticks.
//
// What is due, and when:
//   - a flush of changed state: at once (flush runs after every turn of
//     the loop; the flusher's round is the one interval it waits);
//   - with records pending, a lease renewal: when half the lease is left
//     (lease.runsLow); and the end of the membership's confirmation: its
//     state is then written every round until the coordinator answers
//     (see flush). An idle partition's lease is the node's renewer's;
//   - a claim retry, a release retry, the retention guard: at their time;
//   - records waiting for the node's budget, parked records (a pass to
//     start, keep or end) and a detached cursor waiting for a catch-up
//     slot: every flush interval, as before.

// nextDue returns when the loop must wake next without an event; zero
// when nothing is due.
func (w *worker) nextDue(now time.Time) time.Time {
	next := w.claimAt // housekeep clears it once it ran
	// What is past is handled by flush or was run by housekeep; arming
	// for it would spin the loop.
	at := func(t time.Time) {
		if t.After(now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	if !w.m.Claimed() || w.m.Fenced() {
		return next
	}
	at(w.hold.due())
	tick := now.Add(w.g.n.cfg.FlushInterval)
	if !w.m.Stopped() {
		// A detached cursor waiting for a catch-up slot asks again.
		waitsSlot := w.src.detached && w.src.pass == nil && !w.m.Paused()
		if w.m.Backlog() > 0 || w.m.Parked() > 0 || w.rr.pass != nil || waitsSlot {
			at(tick)
		}
		at(w.guard.next)
	}
	if w.rs.target.Load() != nil && !w.rs.retryAt.IsZero() {
		at(w.rs.retryAt)
	}
	if !w.retired.Load() && w.m.Pending()+w.m.Backlog() > 0 {
		// The lease runs low at half its length; the membership's
		// confirmation ends at its time. Once past either, flush writes
		// the state at every round and the results wake the loop. A
		// partition with nothing pending waits for neither: the node's
		// renewer keeps its lease (renewer.go), and nothing of it is in
		// flight for a new owner's claim to fence.
		at(w.lease.lowAt())
		at(w.g.live.confirmedUntil())
	}
	return next
}

// housekeep runs what came due at now.
func (w *worker) housekeep(now time.Time) {
	if !w.claimAt.IsZero() && !now.Before(w.claimAt) {
		w.claimAt = time.Time{}
		if !w.m.Claimed() && !w.m.Fenced() {
			w.claim()
		}
	}
	// Records that waited for room in the node's budget try again.
	w.m.Refill()
	w.reshape()
	w.manageReread()
	w.guardRetention(now)
}

// publishHolding sets the watermark-age gauge; it needs no more than the
// resolution of the loop's turns.
func (w *worker) publishHolding() {
	if e := w.m.Holding(); e != nil {
		w.pub.holdingSince.Store(e.Accepted.UnixNano())
	} else {
		w.pub.holdingSince.Store(0)
	}
}

// clock is the loop's one timer, armed only when something is due. It
// runs a function when it fires rather than sending on a channel, so a
// loop asleep without a goroutine is woken by it (worker.start). Only the
// loop arms it.
type clock struct {
	t *time.Timer
	// at is when t fires, zero when it is stopped.
	at time.Time
}

func newClock(fire func()) *clock {
	t := time.AfterFunc(time.Hour, fire)
	t.Stop()
	return &clock{t: t}
}

// arm sets the timer for at; zero stops it.
func (c *clock) arm(at, now time.Time) {
	if at.Equal(c.at) {
		return
	}
	c.at = at
	if at.IsZero() {
		c.t.Stop()
		return
	}
	c.t.Reset(max(at.Sub(now), 0))
}

// fired tells the clock its timer fired.
func (c *clock) fired() { c.at = time.Time{} }

func (c *clock) stop() { c.t.Stop() }
