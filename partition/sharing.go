package partition

import (
	"errors"

	"github.com/keyhook/keyhook/keyrange"
	"github.com/keyhook/keyhook/tracking/offsets"
)

// sharing is what a machine keeps once its partition is shared: other
// nodes own some of the key hashes, and their records count as done here
// without being delivered or acked. Once made it stays, even when the
// node comes to own every hash again. The machine's goroutine owns it.
type sharing struct {
	// ranges are the key hashes this node delivers, nil for all of them
	// (a whole partition freezing part of itself), empty for none.
	ranges keyrange.Set
	// frozen are the ranges being given up (drained, not dispatched),
	// nil when none.
	frozen keyrange.Set
	// done is what the watermark walks over: acked plus the offsets of
	// records other sharers own.
	done *offsets.Set
	// foreign counts records read that another sharer owns.
	foreign int64
}

// own returns the ranges s delivers, nil for all of them: a nil s
// delivers all.
func (s *sharing) own() keyrange.Set {
	if s == nil {
		return nil
	}
	return s.ranges
}

// owns reports whether a record of hash h is this node's.
func (s *sharing) owns(h uint16) bool { return s.ranges == nil || s.ranges.Contains(h) }

// share makes the partition shared: from now on records of other
// sharers count as done, never as acked.
func (m *Machine[P]) share() {
	if m.sharing != nil {
		return
	}
	m.sharing = &sharing{done: m.acked.Clone()}
	// Records accepted while the partition was whole were not hashed:
	// their lane's key (or offset) says it. An expiring record without a
	// lane may have left its key's: its hash was fixed then.
	for _, e := range m.pending {
		if e.lane != nil || !e.Expiring() {
			e.hash = m.entryHash(e)
		}
	}
	for _, l := range m.lanes {
		for _, e := range l.q {
			e.hash = m.entryHash(e)
		}
	}
}

// entryHash is hash for an accepted record or an injected one.
func (m *Machine[P]) entryHash(e *Entry[P]) uint16 {
	if e.lane != nil {
		return m.hash([]byte(e.lane.key), e.Offset)
	}
	return m.hash(nil, e.Offset)
}

// hash is the key hash that decides a record's sharer: its key's, or its
// offset's without a key or without ordering.
func (m *Machine[P]) hash(key []byte, off int64) uint16 {
	if m.cfg.Ordering == OrderNone {
		return keyrange.OfOffset(off)
	}
	return keyrange.Of(key, off)
}

// Owns reports whether the record of key at offset is this node's to
// deliver.
func (m *Machine[P]) Owns(key []byte, off int64) bool {
	return m.sharing == nil || m.sharing.owns(m.hash(key, off))
}

// Ranges returns the key hashes this node delivers.
func (m *Machine[P]) Ranges() keyrange.Set {
	if r := m.sharing.own(); r != nil {
		return r
	}
	return keyrange.Full()
}

// Shared reports whether the node delivers part of the key hashes only.
func (m *Machine[P]) Shared() bool { return m.sharing.own() != nil }

// Foreign returns how many records were read that other sharers own.
func (m *Machine[P]) Foreign() int64 {
	if m.sharing == nil {
		return 0
	}
	return m.sharing.foreign
}

// isFrozen reports whether e belongs to a range being given up.
func (m *Machine[P]) isFrozen(e *Entry[P]) bool {
	return m.frozen() != nil && (e.lane != nil || !e.extra) && m.sharing.frozen.Contains(e.hash)
}

// frozen returns the ranges being given up, nil when none.
func (m *Machine[P]) frozen() keyrange.Set {
	if m.sharing == nil {
		return nil
	}
	return m.sharing.frozen
}

// laneFrozen reports whether l's key belongs to a range being given up.
func (m *Machine[P]) laneFrozen(l *lane[P]) bool {
	if m.frozen() == nil {
		return false
	}
	if len(l.q) > 0 {
		return m.isFrozen(l.q[0])
	}
	return m.sharing.frozen.Contains(m.hash([]byte(l.key), -1))
}

// Freeze starts giving up the ranges outside keep: their records are no
// longer dispatched (those in flight finish), and new ones wait. Draining
// says when none is in flight; Shrink then lets them go. Freezing again
// with a wider keep (still within the node's ranges) takes back what is
// kept.
func (m *Machine[P]) Freeze(keep keyrange.Set) {
	cur := m.Ranges()
	fr := cur.Minus(keep.Intersect(cur))
	if fr.IsEmpty() {
		fr = nil
	}
	if fr != nil {
		m.share()
	}
	if m.sharing != nil {
		m.sharing.frozen = fr
	}
	if fr != nil {
		m.ready.filter(m.staysReady)
	}
	m.injected.ready = m.unfrozen(m.injected.ready)
	// Heads a narrower freeze held back go again.
	for _, e := range m.pending {
		if e.lane == nil || e.lane.q[0] == e {
			m.readyAgain(e)
		}
	}
	for _, l := range m.lanes {
		if len(l.q) > 0 && l.q[0].extra {
			m.readyAgain(l.q[0])
		}
	}
}

// staysReady reports whether e, queued as ready, stays so: a frozen one
// leaves its queue, no longer ready.
func (m *Machine[P]) staysReady(e *Entry[P]) bool {
	if m.isFrozen(e) {
		e.state = stateQueued
		return false
	}
	return true
}

// unfrozen filters frozen entries out of a ready queue.
func (m *Machine[P]) unfrozen(q []*Entry[P]) []*Entry[P] {
	if m.frozen() == nil {
		return q
	}
	out := q[:0]
	for _, e := range q {
		if m.staysReady(e) {
			out = append(out, e)
		}
	}
	clear(q[len(out):])
	return out
}

// readyAgain readies a lane head (or lane-less record) that waits for
// nothing but is not queued.
func (m *Machine[P]) readyAgain(e *Entry[P]) {
	if e.state == stateQueued && !m.isFrozen(e) {
		m.makeReady(e)
	}
}

// Draining returns how many records of the frozen ranges are in flight.
func (m *Machine[P]) Draining() int {
	if m.frozen() == nil {
		return 0
	}
	n := 0
	for _, e := range m.pending {
		if e.state == stateOut && m.isFrozen(e) {
			n++
		}
	}
	for _, l := range m.lanes {
		for _, e := range l.q {
			if e.extra && e.state == stateOut && m.isFrozen(e) {
				n++
			}
		}
	}
	return n
}

// ErrDraining is returned by Shrink while records of the frozen ranges are
// in flight.
var ErrDraining = errors.New("partition: records of the ranges given up are in flight")

// Shrink lets the frozen ranges go once none of their records is in
// flight: their pending records count as done here (the next owner
// delivers them; the tracker holds them as not acked), and the node's
// ranges become what Freeze kept. It returns the injected records it
// dropped, which their caller still holds.
func (m *Machine[P]) Shrink() ([]*Entry[P], error) {
	if m.frozen() == nil {
		return nil, nil
	}
	s := m.sharing
	if m.Draining() > 0 {
		return nil, ErrDraining
	}
	var dropped []*Entry[P]
	for key, l := range m.lanes {
		if !m.laneFrozen(l) {
			continue
		}
		for _, e := range l.q {
			if e.extra {
				dropped = append(dropped, e)
			}
		}
		// Parked records are the next owner's like pending ones.
		for _, r := range l.parked {
			if r.extra != nil {
				dropped = append(dropped, r.extra)
				continue
			}
			s.done.Add(r.start, r.end)
			s.foreign += r.end - r.start
			m.unpark(r.end - r.start)
		}
		delete(m.parking.lanes, l)
		delete(m.lanes, key)
	}
	for off, e := range m.pending {
		if !m.isFrozen(e) {
			continue
		}
		m.drop(e)
		s.done.AddOffset(off)
		s.foreign++
	}
	s.ranges = m.Ranges().Minus(s.frozen)
	if s.ranges == nil {
		s.ranges = keyrange.Set{} // none, which nil would not say
	}
	s.frozen = nil
	m.version++
	m.settleWatermark()
	m.fill()
	return dropped, nil
}
