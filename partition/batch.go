package partition

import "time"

// batching is the state of batch assembly (Config.Batch). The machine's
// goroutine owns it.
type batching struct {
	// since is when the ready queue last stopped being empty: how long
	// its records have waited for a batch.
	since time.Time
}

// wait returns how long the ready records wait yet before a batch of
// them is due, 0 when one is: enough are ready, or the oldest has waited
// cfg.MaxWait.
func (b *batching) wait(cfg Batch, ready int, clock func() time.Time) time.Duration {
	if ready >= cfg.MaxRecords || cfg.MaxWait <= 0 {
		return 0
	}
	return max(cfg.MaxWait-clock().Sub(b.since), 0)
}

// Assemble takes a batch out of the ready records when one is due: enough
// records are ready, or the oldest has waited Batch.MaxWait. Otherwise it
// returns nil and how long until one is due (0: nothing is ready). A batch
// holds lane heads oldest first, each followed by the
// next records of its lane, in offset order, within the batch's limits.
// The records count as dispatched only at DispatchBatch; until then they
// are neither ready nor in flight.
func (m *Machine[P]) Assemble() ([]*Entry[P], time.Duration) {
	if !m.dispatching() || m.ready.len() == 0 {
		return nil, 0
	}
	b := m.cfg.Batch
	if left := m.batch.wait(b, m.ready.len(), m.cfg.Clock); left > 0 {
		return nil, left
	}
	out := make([]*Entry[P], 0, min(b.MaxRecords, m.ready.len()))
	size := 0
	fits := func(e *Entry[P]) bool {
		return len(out) < b.MaxRecords && (len(out) == 0 || b.MaxBytes <= 0 || size+e.size <= b.MaxBytes)
	}
	for m.ready.len() > 0 && fits(m.ready.peek()) {
		head := m.ready.pop()
		head.state = stateTaken
		out = append(out, head)
		size += head.size
		if head.lane == nil {
			continue
		}
		for _, f := range head.lane.q[1:] {
			if f.extra || !fits(f) {
				break
			}
			f.state = stateTaken
			out = append(out, f)
			size += f.size
		}
	}
	// Records left ready have waited as long as the batch that just
	// went: they go at the next call.
	return out, 0
}

// DispatchBatch records that a batch from Assemble went out.
func (m *Machine[P]) DispatchBatch(batch []*Entry[P]) {
	now := m.cfg.Clock()
	for _, e := range batch {
		e.Dispatched = now
		e.state = stateOut
	}
	m.inflight += len(batch)
}
