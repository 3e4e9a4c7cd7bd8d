package partition

import (
	"errors"
	"time"

	"github.com/keyhook/keyhook/keyrange"
	"github.com/keyhook/keyhook/tracking/offsets"
)

// ErrNotReady is returned by Dispatch for an entry that is not the next
// ready one.
var ErrNotReady = errors.New("partition: entry is not the next ready one")

// Machine is the state of one partition. It is not safe for concurrent
// use: one goroutine drives it.
type Machine[P any] struct {
	cfg Config

	positions
	// sharing is the state of a partition shared with other nodes, nil
	// while this node delivers all of it.
	sharing *sharing
	// pending are the accepted records in memory not acked, by offset;
	// lanes the keys' queues of them, by key; ready those free to go.
	pending map[int64]*Entry[P]
	lanes   map[string]*lane[P]
	ready   readyQueue[P]
	// backlog are records offered that wait for room; inflight counts
	// the records dispatched without a result yet.
	backlog  []Record[P]
	inflight int
	// superseded counts the records conflation acked without delivery;
	// filtered those the filter rejected (Record.Skip).
	superseded int64
	filtered   int64
	// The parts, each in its own file, and the machine's goroutine owns
	// them all: what the records hold of the budgets, what keys parked
	// by offset, injected records free to go, batch assembly.
	holdings holdings
	parking  parking[P]
	injected injected[P]
	batch    batching

	claimed bool
	stopped bool // draining or fenced: nothing more is dispatched
	fenced  bool
	paused  bool
}

// New returns the machine of a partition that is not yet claimed: it
// accepts no record and is paused until Claim.
func New[P any](cfg Config) (*Machine[P], error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.ParkedBytes == 0 {
		cfg.ParkedBytes = 64
	}
	if cfg.ReadyFloor == 0 {
		cfg.ReadyFloor = 1
	}
	m := &Machine[P]{
		cfg:       cfg,
		positions: positions{floor: -1, next: -1, committed: -1, flushed: -1, watermark: -1},
		pending:   make(map[int64]*Entry[P]),
		lanes:     make(map[string]*lane[P]),
		paused:    true,
		holdings:  holdings{budget: cfg.Budget, parkBudget: cfg.ParkBudget, parkedBytes: cfg.ParkedBytes},
		parking:   newParking[P](cfg),
	}
	return m, nil
}

// Claim makes the partition this node's, with the offsets previous owners
// acked: they are skipped when fetched. Claiming again (after the tracker
// lost its state, or to win back a zombie's claim) adds what it returns.
// The node keeps the ranges it had (all of them at first).
func (m *Machine[P]) Claim(acked *offsets.Set) { m.ClaimRanges(acked, m.sharing.own(), nil) }

// ClaimRanges is Claim for the records whose key hash is in ranges (nil
// or keyrange.Full: all of them), the partition being shared with other
// nodes that own the rest: their records count as done here without
// being delivered or acked. Records below a floor of their hash are
// skipped like acked ones. Ordering partition cannot be shared.
func (m *Machine[P]) ClaimRanges(acked *offsets.Set, ranges keyrange.Set, floors []Floor) {
	if ranges.IsFull() || m.cfg.Ordering == OrderPartition {
		ranges = nil
	}
	if ranges != nil {
		m.share()
	}
	if m.sharing != nil {
		m.sharing.ranges = ranges
	}
	m.floors = floors
	if acked != nil {
		m.acked.Union(acked)
		if m.sharing != nil {
			m.sharing.done.Union(acked)
		}
	}
	m.claimed = true
	m.version++
	m.fill()
}

// Claimed reports whether Claim was called.
func (m *Machine[P]) Claimed() bool { return m.claimed }

// Offer hands fetched records over, in offset order. They are accepted
// while the window has room (and the partition is claimed); the rest wait
// in a backlog that acks drain. The machine takes recs over: the caller
// must not use the slice again.
func (m *Machine[P]) Offer(recs []Record[P]) {
	if len(recs) == 0 {
		return
	}
	if len(m.backlog) == 0 {
		m.backlog = recs
	} else {
		m.backlog = append(m.backlog, recs...)
	}
	m.fill()
}

// fill accepts backlog records while the window has room.
func (m *Machine[P]) fill() {
	if m.claimed {
		i := 0
		for ; i < len(m.backlog) && (m.residentWindow() || !m.full()); i++ {
			if !m.accept(m.backlog[i]) {
				break // no room in the window or the Budget: Refill or an ack retries
			}
			m.backlog[i] = Record[P]{}
		}
		m.backlog = m.backlog[i:]
		if len(m.backlog) == 0 {
			m.backlog = nil
		}
	}
	m.settle()
}

// Refill retries accepting the backlog: the Budget may have room again.
func (m *Machine[P]) Refill() {
	if len(m.backlog) > 0 {
		m.fill()
	}
}

// Close gives back every byte pending records hold of the Budget. The
// machine accepts nothing more afterwards.
func (m *Machine[P]) Close() {
	m.holdings.releaseAll()
	m.claimed = false
	m.backlog = nil
	m.settle()
}

// Held returns the bytes pending records hold of the Budget.
func (m *Machine[P]) Held() int64 { return m.holdings.held }

// ParkHeld returns the bytes parked records hold of the ParkBudget.
func (m *Machine[P]) ParkHeld() int64 { return m.holdings.parkHeld }

// residentWindow reports whether MaxWindow bounds the records held in
// memory rather than the distance from the watermark: when keys park, or
// without lanes. One stuck record under ordering partition holds every
// later one, so fetching past the window would only park them all.
func (m *Machine[P]) residentWindow() bool {
	return m.cfg.ParkAfter > 0 && m.cfg.Ordering != OrderPartition
}

// full reports whether the window is used up: the records held in memory,
// or between the watermark and the fetch position.
func (m *Machine[P]) full() bool {
	if m.residentWindow() {
		return int64(len(m.pending)) >= m.cfg.MaxWindow
	}
	wm := m.watermark
	if wm < 0 {
		wm = m.floor
	}
	return wm >= 0 && m.next >= 0 && m.next-wm >= m.cfg.MaxWindow
}

// accept places one fetched record: skipped when already done, otherwise
// queued on its lane. Offsets the fetch stepped over (transaction markers,
// compaction, aborted data) are not records and count as acked, so they
// never stall the watermark. It returns false, having placed nothing, when
// the window or the Budget has no room for the record.
func (m *Machine[P]) accept(r Record[P]) bool {
	off := r.Offset
	if m.floor < 0 {
		// No commit to start from (the reset policy chose): the first
		// record is the start.
		m.floor = off
	}
	if m.next < 0 {
		m.next = m.floor
	}
	if off < m.next || off < m.floor {
		return true // a refetch of something already placed or committed
	}
	p, h := m.classify(r)
	var l *lane[P]
	held := int64(0)
	if p == placePending {
		if p, l, held = m.room(r); p == placeWait {
			return false
		}
	}
	if off > m.next {
		m.addAcked(m.next, off)
	}
	m.next = off + 1
	m.version++
	switch p {
	case placeSkipped:
		m.addAcked(off, off+1)
		m.filtered++
	case placeAcked:
		m.addAcked(off, off+1)
	case placeForeign:
		// Done here, never acked.
		m.sharing.done.AddOffset(off)
		m.sharing.foreign++
	case placeParked:
		m.park(l, off, r.Time)
	}
	// The watermark can only have moved if the gap started at it.
	m.settleWatermark()
	if p == placePending {
		m.hold(r, h, held)
	}
	return true
}

// place is where accept puts a record.
type place uint8

const (
	// placePending: pending in memory, on its lane.
	placePending place = iota
	// placeAcked: a transaction marker, or a record a previous owner
	// delivered (acked it, or finished its range below a floor).
	placeAcked
	// placeSkipped: a record the filter rejected, acked at once.
	placeSkipped
	// placeForeign: another sharer's record.
	placeForeign
	// placeParked: parked by offset, its value dropped.
	placeParked
	// placeWait: no room in the window or a budget; it waits in the
	// backlog.
	placeWait
)

// classify says where r goes, room permitting, and its key hash (set
// when the partition is shared or has floors).
func (m *Machine[P]) classify(r Record[P]) (place, uint16) {
	if r.Control {
		return placeAcked, 0
	}
	var h uint16
	if m.sharing != nil || m.floors != nil {
		h = m.hash(r.Key, r.Offset)
	}
	switch {
	case m.sharing != nil && !m.sharing.owns(h):
		return placeForeign, h
	case m.acked.Contains(r.Offset) || m.belowFloor(h, r.Offset):
		return placeAcked, h
	case r.Skip:
		// Another sharer's stays foreign (that sharer acks it); one
		// delivered already is not counted twice.
		return placeSkipped, h
	}
	return placePending, h
}

// room finds room for r, a record to be pending: in memory (placePending,
// with the bytes it reserved of the Budget), or parked (placeParked, its
// cost reserved of the ParkBudget) on its lane, returned; placeWait, having
// reserved nothing, when there is none. Only a record that will be
// pending holds memory. A key with parked records, or holding its refill
// cap in memory, parks it; so does one holding more than ParkAfter when
// the window is full and the partition short of work (starved).
// Otherwise a full window or Budget waits, since a node that is merely
// behind would park records of every key and read them all again; when
// starved, the longest keys first park their tails to make room.
func (m *Machine[P]) room(r Record[P]) (place, *lane[P], int64) {
	var l *lane[P]
	if m.parks() && r.Key != nil {
		l = m.lanes[string(r.Key)]
	}
	park := m.parkArrival(l)
	// Room made by parking may have parked the key's own tail: then the
	// record parks behind it.
	if !park && m.residentWindow() && m.full() {
		if !m.evictFor(0) {
			return placeWait, nil, 0
		}
		if park = m.parkArrival(l); !park && m.full() {
			return placeWait, nil, 0
		}
	}
	if !park {
		if held, ok := m.holdings.reserve(r.Bytes); ok {
			return placePending, nil, held
		}
		if !m.evictFor(r.Bytes) {
			return placeWait, nil, 0
		}
		if park = m.parkArrival(l); !park {
			held, ok := m.holdings.reserve(r.Bytes)
			if !ok {
				return placeWait, nil, 0
			}
			return placePending, nil, held
		}
	}
	if !m.holdings.reservePark() {
		return placeWait, nil, 0
	}
	return placeParked, l, 0
}

// hold makes r, of key hash h, a pending record holding held bytes of the
// Budget, on its lane.
func (m *Machine[P]) hold(r Record[P], h uint16, held int64) {
	e := &Entry[P]{Offset: r.Offset, Payload: r.Payload, size: r.Size, bytes: held, hash: h, Accepted: m.cfg.Clock(), Time: r.Time}
	m.pending[e.Offset] = e
	if e.lane = m.laneOf(r.Key); e.lane == nil {
		m.makeReady(e)
		return
	}
	if m.cfg.Conflate && m.cfg.Ordering == OrderKey {
		m.supersede(e.lane)
	}
	m.join(e.lane, e)
}

// laneOf returns the lane of a record of key, made when it has none yet;
// nil when the record waits for nothing (ordering none, or no key under
// ordering key).
func (m *Machine[P]) laneOf(key []byte) *lane[P] {
	switch {
	case m.cfg.Ordering == OrderNone:
		return nil
	case m.cfg.Ordering == OrderPartition:
		return m.lane("")
	case key == nil:
		return nil
	}
	// Looked up before it is made: the lookup does not copy the key.
	if l := m.lanes[string(key)]; l != nil {
		return l
	}
	return m.lane(string(key))
}

// join appends e to l's queue: ready at once as its head.
func (m *Machine[P]) join(l *lane[P], e *Entry[P]) {
	l.q = append(l.q, e)
	if len(l.q) == 1 {
		m.makeReady(e)
	}
}

// supersede acks, without delivering it, the record of l waiting behind
// its head for a newer one to take its place: conflation keeps a key's
// newest record only. Records out, in a batch, or injected are kept.
func (m *Machine[P]) supersede(l *lane[P]) {
	n := len(l.q)
	if n < 2 {
		return
	}
	old := l.q[n-1]
	if old.state != stateQueued || old.extra {
		return
	}
	l.q[n-1] = nil
	l.q = l.q[:n-1]
	m.addAcked(old.Offset, old.Offset+1)
	m.drop(old)
	m.superseded++
	m.version++
}

// Filtered returns how many records were acked without delivery because
// the filter rejected them (Record.Skip).
func (m *Machine[P]) Filtered() int64 { return m.filtered }

// Superseded returns how many records conflation acked without delivery.
func (m *Machine[P]) Superseded() int64 { return m.superseded }

// drop takes e out of the pending records and gives back what it holds
// of the Budget, which it returns: acked, superseded, parked from memory,
// or left to the next owner of its range.
func (m *Machine[P]) drop(e *Entry[P]) int64 {
	delete(m.pending, e.Offset)
	m.holdings.release(e.bytes)
	return e.bytes
}

func (m *Machine[P]) lane(key string) *lane[P] {
	l := m.lanes[key]
	if l == nil {
		l = &lane[P]{key: key}
		m.lanes[key] = l
	}
	return l
}

// makeReady queues e for dispatch: a lane's head, or a lane-less record.
func (m *Machine[P]) makeReady(e *Entry[P]) {
	if m.isFrozen(e) {
		return // its range is being given up: it waits for the next owner
	}
	e.state = stateReady
	if e.extra {
		m.injected.ready = append(m.injected.ready, e)
		return
	}
	if m.ready.len() == 0 && m.cfg.Batch.MaxRecords > 0 {
		m.batch.since = m.cfg.Clock()
	}
	m.ready.push(e)
}

// dispatching reports whether records may go out now.
func (m *Machine[P]) dispatching() bool { return m.claimed && !m.stopped }

// Peek returns the next record to dispatch, nil when none may go now: the
// ready record of the lowest offset (see readyQueue). It stays ready until
// Dispatch.
func (m *Machine[P]) Peek() *Entry[P] {
	if !m.dispatching() {
		return nil
	}
	return m.ready.peek()
}

// Dispatch records that e, the entry Peek returned, went to the endpoint.
func (m *Machine[P]) Dispatch(e *Entry[P]) error {
	if e == nil || m.ready.peek() != e {
		return ErrNotReady
	}
	m.ready.pop()
	return m.dispatched(e)
}

// dispatched marks e, just taken out of its queue, as gone to the
// endpoint.
func (m *Machine[P]) dispatched(e *Entry[P]) error {
	m.inflight++
	e.state = stateOut
	e.Dispatched = m.cfg.Clock()
	if m.paused && m.claimed && m.parks() && m.starved() {
		// The last record ready went out while the fetch waits for room:
		// what waits is taken, the keys holding the window parking their
		// tails (fill), or the fetch resumes (settle).
		if len(m.backlog) > 0 {
			m.fill()
		} else {
			m.settle()
		}
	}
	return nil
}

// Done reports the end of a dispatched record: acked (delivered or
// dead-lettered) or not (aborted: shutdown or a lost partition; it stays
// pending for the next owner). An ack frees the next record of its lane.
func (m *Machine[P]) Done(e *Entry[P], acked bool) {
	m.inflight--
	e.state = stateFinished
	if !acked {
		e.state = stateAborted
	}
	if e.extra {
		// Whatever its outcome, an injected record frees its lane: its
		// caller keeps what is not done.
		if e.lane != nil {
			m.leaveLane(e.lane, e)
		}
		return
	}
	if !acked {
		return
	}
	if m.pending[e.Offset] != e {
		return // not tracked (anymore): nothing to ack
	}
	m.ackOffset(e.Offset)
	m.drop(e)
	m.version++
	if l := e.lane; l != nil {
		m.leaveLane(l, e)
	}
	m.settleWatermark()
	m.fill()
}

// leaveLane takes an acked entry out of its lane and readies the next.
// Acks of a lane come in its order (only its head is out, or a batch acked
// in offset order), so e is the head; the search keeps the lane whole if a
// caller ever acks out of order.
func (m *Machine[P]) leaveLane(l *lane[P], e *Entry[P]) {
	if l.q[0] != e {
		for i, f := range l.q {
			if f == e {
				l.q = append(l.q[:i], l.q[i+1:]...)
				break
			}
		}
		return
	}
	l.q[0] = nil
	l.q = l.q[1:]
	if len(l.q) == 0 {
		if len(l.parked) == 0 {
			delete(m.lanes, l.key)
		}
	} else if l.q[0].state == stateQueued {
		m.makeReady(l.q[0])
	}
}

// settle recomputes the watermark and the fetch decision: with MaxWindow
// records between the watermark and the fetch position the partition
// pauses; at half of it, it resumes. Unclaimed or stopped, it stays
// paused.
func (m *Machine[P]) settle() {
	m.settleWatermark()
	// Starved, the fetch goes on even with the window full: what it
	// brings makes the keys holding the window park their tails
	// (accept), or waits in the backlog when none can.
	starved := m.parks() && m.starved()
	switch {
	case !m.claimed || m.stopped:
		m.paused = true
	case m.full() && !starved || len(m.backlog) > 0:
		m.paused = true
	case m.residentWindow():
		if int64(len(m.pending)) <= m.cfg.MaxWindow/2 || starved {
			m.paused = false
		}
	case m.next < 0 || m.watermark < 0 || m.next-m.watermark <= m.cfg.MaxWindow/2:
		m.paused = false
	}
}

// Paused reports whether fetching the partition should be paused now.
func (m *Machine[P]) Paused() bool { return m.paused }

// Stop ends dispatching (a drain): what is in flight finishes, nothing new
// goes out, fetching pauses.
func (m *Machine[P]) Stop() {
	m.stopped = true
	m.settle()
}

// Fence stops all work: another owner claimed the partition. Nothing is
// flushed or committed any more.
func (m *Machine[P]) Fence() {
	m.fenced = true
	m.Stop()
}

// Fenced reports whether Fence was called.
func (m *Machine[P]) Fenced() bool { return m.fenced }

// Stopped reports whether dispatching ended (Stop or Fence).
func (m *Machine[P]) Stopped() bool { return m.stopped }

// InFlight returns how many dispatched records have no result yet.
func (m *Machine[P]) InFlight() int { return m.inflight }

// Pending returns how many accepted records are not acked, parked ones
// included.
func (m *Machine[P]) Pending() int { return len(m.pending) + int(m.parking.count) }

// Backlog returns how many offered records wait for room in the window.
func (m *Machine[P]) Backlog() int { return len(m.backlog) }

// Keys returns how many keys have a record pending.
func (m *Machine[P]) Keys() int { return len(m.lanes) }

// Holding returns the pending record the watermark waits for, nil when
// none is (nothing pending at the watermark: the fetch has not reached
// it, or the partition is not claimed).
func (m *Machine[P]) Holding() *Entry[P] {
	if m.watermark < 0 {
		return nil
	}
	return m.pending[m.watermark]
}
