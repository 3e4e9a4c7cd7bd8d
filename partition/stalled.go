package partition

import (
	"sort"
	"time"
)

// Stalled is one key whose records do not flow, as Machine.Stalled lists
// it: its head is out and has been for a while (or retrying says it
// failed), or some of its records are parked.
type Stalled[P any] struct {
	// Key is the lane's key ("" for the one lane of ordering partition).
	Key string
	// Head is the lane's first record in memory; nil when every record
	// of the key is parked.
	Head *Entry[P]
	// Offset is the lowest offset of the key: its head's, or else its
	// first parked one's. The key's later records wait behind it.
	Offset int64
	// Read is when the record at Offset was read.
	Read time.Time
	// Queued counts the key's records in memory, its head included;
	// Parked those parked by offset, their values dropped.
	Queued int
	Parked int64
}

// Stalled lists the keys whose records do not flow, lowest offset
// first, at most limit of them, and how many there are in all:
//
//   - a key whose head is out and retrying(head) reports a failed attempt
//     (the machine does not see attempts: its caller does);
//   - a key whose head went out at or before slow, or whose record
//     behind its head was read at or before slow: its records wait
//     behind one in flight;
//   - a key with parked records.
//
// Records without a lane (ordering none, or no key) are not listed. It
// reads every lane, so callers should not call it per record: the
// dispatcher calls it when it writes the partition's state, at most
// once a second. It changes nothing.
func (m *Machine[P]) Stalled(limit int, slow time.Time, retrying func(*Entry[P]) bool) ([]Stalled[P], int) {
	var out []Stalled[P]
	for _, l := range m.lanes {
		s, ok := m.stalled(l, slow, retrying)
		if ok {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Offset < out[j].Offset })
	total := len(out)
	if len(out) > limit {
		clear(out[limit:])
		out = out[:limit]
	}
	return out, total
}

// stalled describes l when its records do not flow.
func (m *Machine[P]) stalled(l *lane[P], slow time.Time, retrying func(*Entry[P]) bool) (Stalled[P], bool) {
	s := Stalled[P]{Key: l.key, Queued: len(l.q), Offset: -1}
	for _, r := range l.parked {
		if r.extra == nil {
			s.Parked += r.end - r.start
			if s.Offset < 0 {
				s.Offset, s.Read = r.start, time.Unix(0, r.read)
			}
		}
	}
	if len(l.q) > 0 {
		h := l.q[0]
		s.Head, s.Offset, s.Read = h, h.Offset, h.Accepted
		if h.state == stateOut {
			waited := !h.Dispatched.After(slow) || len(l.q) > 1 && !l.q[1].Accepted.After(slow)
			if waited || retrying(h) {
				return s, true
			}
		}
	}
	return s, s.Parked > 0
}
