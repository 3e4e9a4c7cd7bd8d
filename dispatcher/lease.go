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
// The worker's loop and the node's renewer extend end (extend); the pool
// reads it (held). lapseLogged is the loop's.
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
// by the tracker. Only the loop calls it: it logs the end of a lapse.
func (l *lease) renew(sent time.Duration, log *slog.Logger) {
	l.extend(sent)
	l.noteConfirmed(log)
}

// extend extends the lease from sent, when a write or a renewal sent then
// was accepted by the tracker, and reports whether the lease was held
// before. Any goroutine may call it (the node's renewer does).
func (l *lease) extend(sent time.Duration) (held bool) {
	end := int64(sent + l.length)
	for {
		cur := l.end.Load()
		held = int64(l.since()) < cur
		if end <= cur || l.end.CompareAndSwap(cur, end) {
			return held
		}
	}
}

// noteConfirmed logs, once, that a lapse the loop logged ended.
func (l *lease) noteConfirmed(log *slog.Logger) {
	if l.lapseLogged && l.held() {
		log.Info("ownership confirmed again; deliveries resume")
		l.lapseLogged = false
	}
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
