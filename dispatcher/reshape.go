package dispatcher

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/keyhook/keyhook/keyrange"
	"github.com/keyhook/keyhook/tracking"
)

// reshaper is a worker's part in sharing a partition by key range: the
// ranges it was assigned and the narrower target the group's balancer
// sets, and the release of the ranges given up. target is set by the
// group and read by the loop; the rest only the loop uses.
type reshaper struct {
	// target, when set, is a narrower set of key ranges the group's
	// balancer assigned: the loop drains the rest, writes its state,
	// releases them and shrinks (reshape).
	target atomic.Pointer[keyrange.Set]
	// assigned are the key ranges the partition was assigned with (nil:
	// all); the first claim is of them, or of target if narrower.
	assigned keyrange.Set
	// releasing: a release of drained ranges is in flight; retryAt paces
	// the next try after a failed one.
	releasing bool
	retryAt   time.Time
}

// claimRanges is what a claim asks for: the ranges held once claimed;
// before, those assigned, or a narrower target that came since (nothing
// to drain yet). nil is the whole partition.
func (w *worker) claimRanges() keyrange.Set {
	if w.m.Claimed() {
		if !w.m.Shared() {
			return nil
		}
		return w.m.Ranges()
	}
	if t := w.rs.target.Load(); t != nil {
		if t.IsFull() {
			return nil
		}
		return *t
	}
	return w.rs.assigned
}

// assignedRanges are the ranges the partition was assigned with.
func (w *worker) assignedRanges() keyrange.Set {
	if w.rs.assigned == nil {
		return keyrange.Full()
	}
	return w.rs.assigned
}

// setTarget hands the worker the ranges the group's balancer now assigns
// it; nil or the whole space is all of them. It never blocks.
func (w *worker) setTarget(rs keyrange.Set) {
	if rs == nil {
		rs = keyrange.Full()
	}
	w.rs.target.Store(&rs)
	w.signal()
}

// reshape gives up the ranges the balancer took away (an in-place shrink;
// the balancer never grows a partition in place): their keys are frozen
// (no new dispatch), and once none of their records is in flight, the
// state is written and the ranges released in the tracker, in that order,
// so the next owner starts from every ack. Only then does the machine let
// their records go, and the group tell the balancer, whose next
// generation hands the ranges to their new owner.
func (w *worker) reshape() {
	tp := w.rs.target.Load()
	if tp == nil || w.rs.releasing || !w.m.Claimed() || w.m.Fenced() || w.m.Stopped() || w.retired.Load() {
		return
	}
	keep := tp.Intersect(w.m.Ranges())
	if keep.Equal(w.m.Ranges()) {
		w.m.Freeze(keep) // takes back an earlier, narrower freeze
		return
	}
	w.m.Freeze(keep)
	if w.m.Draining() > 0 || w.flushing || w.claiming || time.Now().Before(w.rs.retryAt) {
		return
	}
	w.rs.releasing = true
	req := w.flushReq()
	give := w.m.Ranges().Minus(keep)
	epoch := w.epoch
	w.bg.Add(1)
	go func() {
		defer w.bg.Done()
		ctx, cancel := context.WithTimeout(w.ctx, flushTimeout)
		defer cancel()
		res := w.g.n.tracker.FlushRanges(ctx, []tracking.PartitionFlush{{Key: w.pk, Flush: req.f}})[0]
		err := res.Err
		if err == nil {
			err = w.g.n.tracker.ReleaseRanges(ctx, w.pk, epoch, give)
		}
		w.mail.postRelease(releaseResult{flush: req.result(res), err: err})
	}()
}

// released applies the outcome of a release of drained ranges.
func (w *worker) released(r releaseResult) {
	w.rs.releasing = false
	w.wakeHandover()
	if w.m.Fenced() {
		return
	}
	switch err := r.err; {
	case err == nil:
		w.lease.renew(r.flush.sent, w.log)
		w.m.FlushedMerged(r.flush.snap, r.flush.merged)
		given := w.m.Ranges()
		dropped, err := w.m.Shrink()
		if err != nil {
			// Nothing dispatches a frozen range, so none can be in flight.
			w.log.Error("released ranges still in flight", "err", err)
			return
		}
		if w.g.redriver != nil {
			w.g.redriver.forget(dropped)
		}
		w.publishRanges()
		w.log.Info("key ranges released", "released", given.Minus(w.m.Ranges()).String(), "keeping", w.m.Ranges().String())
		w.g.rangesReleased(w, w.m.Ranges())
	case errors.Is(err, tracking.ErrStateLost), errors.Is(err, tracking.ErrFenced):
		// As for a flush: claim again; a newer owner refuses it.
		w.claim()
	default:
		w.rs.retryAt = time.Now().Add(time.Second)
		w.log.Warn("releasing key ranges failed; will retry", "err", err)
	}
}
