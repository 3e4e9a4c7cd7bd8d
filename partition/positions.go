package partition

import (
	"time"

	"github.com/keyhook/keyhook/keyrange"
	"github.com/keyhook/keyhook/tracking/offsets"
)

// positions are the offsets of a partition (see the package doc) and
// the acks the watermark walks over, with the flush and commit that
// follow them. The machine's goroutine owns them.
type positions struct {
	floor     int64 // every offset below is done; -1 unknown
	next      int64 // fetch position; -1 before the first record
	committed int64 // last Kafka commit known; -1 none
	flushed   int64 // watermark of the last successful flush; -1 none
	watermark int64 // lowest offset at or above floor not acked; -1 unknown

	// acked holds true acks only: delivered or dead-lettered records,
	// gaps and markers, and what previous owners acked. It is what the
	// tracker stores, so other owners may take it as a fact. A shared
	// partition's watermark walks over more (see sharing).
	acked offsets.Set
	// floors are what the previous owners had delivered, per range, until
	// the fetch passed them all.
	floors []Floor

	// version counts changes worth flushing; flushedVersion is the one
	// the last successful flush wrote.
	version, flushedVersion uint64
}

// SetCommitted records a Kafka commit: the group's committed offset at
// assignment, or a commit this node made. Offsets below it are done. A
// commit never moves back, so a lower offset changes nothing.
func (m *Machine[P]) SetCommitted(o int64) {
	if o < 0 || o <= m.committed {
		return
	}
	m.committed = o
	if o > m.floor {
		m.floor = o
	}
	m.settle()
}

// Floor says that every record whose key hash is in Range and whose
// offset is below Below was delivered: what a previous owner of the
// range had finished.
type Floor struct {
	Range keyrange.Range
	Below int64
}

// belowFloor reports whether a previous owner of h's range delivered
// the record at off. Floors are dropped once the fetch passed them all.
func (p *positions) belowFloor(h uint16, off int64) bool {
	for _, f := range p.floors {
		if f.Range.Contains(h) {
			return off < f.Below
		}
	}
	return false
}

// floorsPassed reports whether the fetch is past every floor.
func (p *positions) floorsPassed() bool {
	for _, f := range p.floors {
		if p.next < f.Below {
			return false
		}
	}
	return true
}

// addAcked records true acks (gaps, markers, deliveries) in the acked
// set, and in the done set when the partition is shared.
func (m *Machine[P]) addAcked(start, end int64) {
	m.acked.Add(start, end)
	if m.sharing != nil {
		m.sharing.done.Add(start, end)
	}
}

// ackOffset is addAcked for the one offset of a delivery.
func (m *Machine[P]) ackOffset(off int64) {
	m.acked.AddOffset(off)
	if m.sharing != nil {
		m.sharing.done.AddOffset(off)
	}
}

// settleWatermark recomputes the watermark from the acked set (the done
// set, when the partition is shared).
func (m *Machine[P]) settleWatermark() {
	if m.floor < 0 {
		m.watermark = -1
		return
	}
	m.acked.TrimBelow(m.floor)
	done := &m.acked
	if m.sharing != nil {
		done = m.sharing.done
		done.TrimBelow(m.floor)
	}
	m.watermark = done.Watermark(m.floor)
	if m.floors != nil && m.next >= 0 && m.floorsPassed() {
		m.floors = nil
	}
}

// Watermark returns the lowest offset not acked, -1 while unknown.
func (m *Machine[P]) Watermark() int64 { return m.watermark }

// Next returns the fetch position, -1 before the first record.
func (m *Machine[P]) Next() int64 { return m.next }

// Committed returns the last Kafka commit known, -1 none.
func (m *Machine[P]) Committed() int64 { return m.committed }

// Snapshot is the partition's state for one flush to the tracker.
type Snapshot struct {
	version uint64
	// Acked is the acked set itself, valid until the machine changes:
	// encode it before driving the machine again.
	Acked *offsets.Set
	// Ranges are the key hashes the state is of, nil for all of them.
	Ranges keyrange.Set
	// Watermark is the lowest offset of this node's ranges not acked.
	Watermark int64
	Next      int64
	Committed int64
	Pending   int
	InFlight  int
	Keys      int
	// Oldest is when the record at the watermark was dispatched, zero
	// when it is not out.
	Oldest time.Time
}

// Dirty reports whether the state changed since the last successful
// flush and may be flushed (claimed, not fenced).
func (m *Machine[P]) Dirty() bool {
	return m.claimed && !m.fenced && m.version != m.flushedVersion
}

// Touch marks the state changed, so the next flush writes it whatever
// happened (a final flush before a commit or a release).
func (m *Machine[P]) Touch() { m.version++ }

// Snapshot returns the state to flush.
func (m *Machine[P]) Snapshot() Snapshot {
	s := Snapshot{
		version: m.version, Acked: &m.acked, Ranges: m.sharing.own(),
		Watermark: m.watermark, Next: m.next, Committed: m.committed,
		Pending: m.Pending(), InFlight: m.inflight, Keys: len(m.lanes),
	}
	if e := m.pending[m.watermark]; e != nil {
		s.Oldest = e.Dispatched
	}
	return s
}

// Flushed records that s reached the tracker: its watermark may now be
// committed.
func (m *Machine[P]) Flushed(s Snapshot) { m.FlushedMerged(s, -1) }

// FlushedMerged is Flushed with the partition's merged watermark the
// tracker answered (-1 unknown): the lowest offset no owner of any range
// has acked. A shared partition may commit only that; a whole one the
// higher of it and its own.
func (m *Machine[P]) FlushedMerged(s Snapshot, merged int64) {
	if s.version > m.flushedVersion {
		m.flushedVersion = s.version
	}
	c := max(s.Watermark, merged)
	if s.Ranges != nil {
		c = merged
	}
	if c > m.flushed {
		m.flushed = c
	}
}

// Behind reports whether a shared partition's merged watermark, as last
// flushed, trails this node's own: other sharers have not caught up, so
// flushing again (even with nothing new) learns when they do.
func (m *Machine[P]) Behind() bool {
	return m.Shared() && m.claimed && !m.fenced && m.flushed < m.watermark
}

// CommitCandidate returns the offset to commit to Kafka, if it is ahead of
// the last commit. It is the watermark of the last successful flush, never
// the live one: the Kafka commit is never ahead of the tracking state, so
// a node fenced in the tracker cannot commit what it acked after losing
// its claim.
func (m *Machine[P]) CommitCandidate() (int64, bool) {
	if m.fenced || m.flushed < 0 || m.flushed <= m.committed {
		return 0, false
	}
	return m.flushed, true
}
