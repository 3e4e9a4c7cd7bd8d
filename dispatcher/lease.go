package dispatcher

import (
	"log/slog"
	"sync/atomic"
	"time"
)

// lease is a worker's ownership lease. It ends at the send time of the
// last claim or flush the tracker accepted, plus the node's lease
// (Config.lease). Past it, neither the loop nor the pool starts a delivery
// of the partition until a flush confirms the claim again or is refused: a
// node frozen for as long as the group takes to give its partitions away
// (SIGSTOP, a VM paused) must not deliver on stale ownership when it
// resumes.
//
// Only the worker's loop writes it; the pool reads end (held).
type lease struct {
	// born is the monotonic time base of end and of the send times.
	born time.Time
	// length is Config.lease.
	length time.Duration
	// end is when the lease ends, in ns since born.
	end atomic.Int64
	// lapseLogged: the lapse was logged; the renewal is too. Loop-owned.
	lapseLogged bool
}

func newLease(length time.Duration) lease {
	return lease{born: time.Now(), length: length}
}

// since is the lease's monotonic clock: the time since born.
func (l *lease) since() time.Duration { return time.Since(l.born) }

// held reports whether the tracker confirmed the claim within the lease.
func (l *lease) held() bool { return l.heldAt(time.Now()) }

func (l *lease) heldAt(now time.Time) bool { return int64(now.Sub(l.born)) < l.end.Load() }

// renew extends the lease from sent, when a write sent then was accepted
// by the tracker.
func (l *lease) renew(sent time.Duration, log *slog.Logger) {
	end := int64(sent + l.length)
	if end <= l.end.Load() {
		return
	}
	if !l.held() && l.lapseLogged {
		log.Info("ownership confirmed again; deliveries resume")
	}
	l.lapseLogged = false
	l.end.Store(end)
}

// runsLow reports whether the lease has less than half its length left:
// flush then writes the state even when nothing changed, so an idle
// partition keeps its lease and delivers its next record at once.
func (l *lease) runsLow() bool {
	return l.end.Load()-int64(l.since()) < int64(l.length/2)
}

// lowAt is when the lease starts to run low.
func (l *lease) lowAt() time.Time {
	return l.born.Add(time.Duration(l.end.Load()) - l.length/2)
}

// logLapse logs, once per lapse, that the lease ran out.
func (l *lease) logLapse(log *slog.Logger) {
	if l.held() || l.lapseLogged {
		return
	}
	l.lapseLogged = true
	log.Warn("ownership not confirmed for the lease; no delivery starts until the tracker confirms or refuses the claim",
		"lease", l.length)
}
