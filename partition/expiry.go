package partition

import "time"

// Records about to fall out of the topic's retention leave their key's
// turn. Expiry keeps no state of its own: an entry says it is expiring,
// a lane when its parked records are (lane.rescue).

// Expire finds the pending records whose timestamp is before cutoff: the
// topic's retention is about to delete them, after which a crash would
// lose them and a parked one could not be read again. Each is marked
// expiring and let out of its key's turn: one in memory goes at once (or
// goes on, when already out), a parked one is read again at once,
// whatever room its key has. What its delivery does then (dead-lettered
// with the reason, or delivered out of turn) is the caller's policy. It
// returns how many records it found, at most max a call.
func (m *Machine[P]) Expire(cutoff time.Time, max int) int {
	if !m.claimed || m.stopped || max <= 0 {
		return 0
	}
	n := 0
	for _, e := range m.pending {
		if n >= max {
			break
		}
		if e.Time.IsZero() || !e.Time.Before(cutoff) || e.expiring {
			continue
		}
		n++
		e.expiring = true
		// It may leave its lane, after which share could not tell its
		// key's hash: it is fixed now.
		e.hash = m.entryHash(e)
		if l := e.lane; l != nil && e.state == stateQueued && l.q[0] != e {
			// Out of its lane, keeping the order of the others.
			for i, f := range l.q {
				if f == e {
					l.q = append(l.q[:i], l.q[i+1:]...)
					break
				}
			}
			e.lane = nil
			m.makeReady(e)
		}
	}
	c := cutoff.UnixMilli()
	for l := range m.parking.lanes {
		if n >= max {
			break
		}
		if r := l.parked[0]; r.extra == nil && r.ts > 0 && r.ts < c && l.rescue < c {
			if l.rescue == 0 {
				n++
			}
			l.rescue = c
		}
	}
	return n
}

// OldestTime returns the oldest timestamp of the pending records, in
// memory or parked (a parked run counts its first record's); zero when
// none has one.
func (m *Machine[P]) OldestTime() time.Time {
	var oldest time.Time
	for _, e := range m.pending {
		if !e.Time.IsZero() && (oldest.IsZero() || e.Time.Before(oldest)) {
			oldest = e.Time
		}
	}
	for l := range m.parking.lanes {
		for _, r := range l.parked {
			if r.extra == nil {
				if t := time.UnixMilli(r.ts); r.ts > 0 && (oldest.IsZero() || t.Before(oldest)) {
					oldest = t
				}
				break
			}
		}
	}
	return oldest
}
