package dispatcher

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/keyhook/keyhook/tracking"
)

// renewer keeps the ownership leases (lease.go) of the node's claimed
// partitions, all of them in one round trip per tick. A partition with
// nothing to write would otherwise wake its loop every half lease to
// flush an unchanged state: with a thousand subscriptions of eight
// partitions, thousands of wake-ups and snapshot writes a second for
// nothing. A renewal confirms the claim exactly as a flush would
// (tracking.Store.RenewRanges) and extends the lease from when it was
// sent; a partition whose renewal is refused is woken to flush, which
// handles the refusal as it handles a refused flush. A partition with
// records pending still flushes when its lease runs low, so its lease
// does not depend on the renewer alone.
type renewer struct {
	tracker Tracker
	log     *slog.Logger
	// length is the lease; tick how often the renewer looks. A lease is
	// renewed once less than due of it is left: three quarters, so that a
	// renewal comes well before it runs low (lease.runsLow) and a round
	// that fails is retried a few times before it lapses.
	length, tick, due time.Duration

	// mu guards ws: the workers started and not yet ended.
	mu sync.Mutex
	ws map[*worker]struct{}

	// failing is set while rounds fail; only run's goroutine uses it.
	failing bool
}

func newRenewer(tracker Tracker, length time.Duration, log *slog.Logger) *renewer {
	return &renewer{tracker: tracker, log: log, length: length, tick: length / 8, due: length * 3 / 4,
		ws: make(map[*worker]struct{})}
}

func (r *renewer) add(w *worker) {
	r.mu.Lock()
	r.ws[w] = struct{}{}
	r.mu.Unlock()
}

func (r *renewer) remove(w *worker) {
	r.mu.Lock()
	delete(r.ws, w)
	r.mu.Unlock()
}

// run renews every tick until ctx ends.
func (r *renewer) run(ctx context.Context) {
	t := time.NewTicker(r.tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.round(ctx, time.Now())
		}
	}
}

// round renews the leases with less than due left, as of now.
func (r *renewer) round(ctx context.Context, now time.Time) {
	var ws []*worker
	var rs []tracking.PartitionRenewal
	r.mu.Lock()
	for w := range r.ws {
		ranges := w.pub.ranges.Load()
		if !w.pub.claimed.Load() || w.pub.fenced.Load() || w.retired.Load() || ranges == nil {
			continue
		}
		if left := time.Duration(w.lease.end.Load()) - now.Sub(w.lease.born); left >= r.due {
			continue
		}
		ws = append(ws, w)
		rs = append(rs, tracking.PartitionRenewal{Key: w.pk, Epoch: w.pub.epoch.Load(), Ranges: *ranges})
	}
	r.mu.Unlock()
	if len(rs) == 0 {
		return
	}
	// Each chunk of the round has its own deadline (inChunks).
	errs := make([]error, len(rs))
	inChunks(len(rs), func(_, lo, hi int) {
		ctx, cancel := context.WithTimeout(ctx, flushTimeout)
		defer cancel()
		copy(errs[lo:hi], r.tracker.RenewRanges(ctx, rs[lo:hi]))
	})
	failed := 0
	for i, w := range ws {
		switch err := errs[i]; {
		case err == nil:
			if !w.lease.extend(now.Sub(w.lease.born)) {
				// The lease had lapsed: the loop resumes deliveries.
				w.signal()
			}
		case errors.Is(err, tracking.ErrFenced), errors.Is(err, tracking.ErrStateLost):
			// The loop flushes, and a refused flush claims again or
			// fences the partition.
			w.mail.postRefused()
		default:
			failed++
			w.g.countError("renew")
		}
	}
	switch {
	case failed > 0 && !r.failing:
		r.failing = true
		r.log.Warn("renewing ownership leases failed; partitions with nothing pending stop delivering when theirs run out",
			"failed", failed, "of", len(rs), "err", firstErr(errs))
	case failed == 0 && r.failing:
		r.failing = false
		r.log.Info("ownership leases renewed again", "renewed", len(rs))
	}
}

func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
