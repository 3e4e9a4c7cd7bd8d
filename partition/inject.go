package partition

// injected is what a machine keeps of the records Inject queued that are
// not on a lane's queue: those free to go, in the order they became so.
// They never go in a batch. The machine's goroutine owns it.
type injected[P any] struct {
	ready []*Entry[P]
}

// Inject queues a record that is not one of the partition's offsets (a
// dead letter delivered again) on the lane of key, behind the key's
// pending records, so that it goes out only once they are acked and the
// key's later records wait for it. It is neither acked nor counted in the
// window or the Budget: it leaves its lane at Done, acked or not. Without
// a lane (ordering none, or no key under ordering key) it is free to go
// at once. It goes out through PeekExtra and DispatchExtra, never in a
// batch.
func (m *Machine[P]) Inject(key []byte, payload P) *Entry[P] {
	e := &Entry[P]{Offset: -1, Payload: payload, extra: true}
	e.lane = m.laneOf(key)
	if e.lane != nil && m.cfg.Ordering == OrderKey {
		e.hash = m.hash(key, -1)
	}
	if e.lane == nil {
		m.makeReady(e)
		return e
	}
	if len(e.lane.parked) > 0 {
		// Behind the key's parked records, and before its later ones.
		e.lane.parked = append(e.lane.parked, parkRun[P]{extra: e})
		return e
	}
	m.join(e.lane, e)
	return e
}

// PeekExtra returns the next injected record to dispatch, nil when none
// may go now.
func (m *Machine[P]) PeekExtra() *Entry[P] { return m.head(m.injected.ready) }

// DispatchExtra records that e, the entry PeekExtra returned, went out.
func (m *Machine[P]) DispatchExtra(e *Entry[P]) error { return m.dispatchHead(&m.injected.ready, e) }

// head is q's first entry when records may go out now, else nil.
func (m *Machine[P]) head(q []*Entry[P]) *Entry[P] {
	if !m.dispatching() || len(q) == 0 {
		return nil
	}
	return q[0]
}

// dispatchHead takes e, q's first entry, out of q as dispatched.
func (m *Machine[P]) dispatchHead(q *[]*Entry[P], e *Entry[P]) error {
	if len(*q) == 0 || (*q)[0] != e {
		return ErrNotReady
	}
	(*q)[0] = nil
	*q = (*q)[1:]
	return m.dispatched(e)
}
