package partition

import "time"

// parking is what a machine keeps of the records its keys parked by
// offset, their values dropped, until a fetch made again brings them
// back (Reread, Unpark); each lane keeps its own parked runs. The
// machine's goroutine owns it.
type parking[P any] struct {
	// lanes are the lanes with parked records; count counts those
	// records.
	lanes map[*lane[P]]struct{}
	count int64
	// evicted counts records parked from memory (parkTail).
	evicted int64
	// A lane holding refillCap records in memory parks its later ones,
	// and one holding more than laneCap when the window is full and
	// nothing is ready parks its tail too; Unpark fills it up to
	// refillCap, so that one fetch made again serves many of its
	// records.
	laneCap, refillCap int
}

func newParking[P any](cfg Config) parking[P] {
	// A batch may take a lane's records up to its size.
	laneCap := max(cfg.ParkAfter, cfg.Batch.MaxRecords)
	return parking[P]{
		lanes:   make(map[*lane[P]]struct{}),
		laneCap: laneCap,
		// A key taking parked records back takes many at once (one
		// fetch made again serves them), within a tenth of the window.
		refillCap: max(4*laneCap, int(cfg.MaxWindow/10)),
	}
}

// parks reports whether keys park records beyond ParkAfter. A key that
// conflates holds two records at most: it never parks.
func (m *Machine[P]) parks() bool {
	return m.cfg.ParkAfter > 0 && m.cfg.Ordering == OrderKey && !m.cfg.Conflate
}

// park appends off to l's parked records: its value is dropped, and
// Unpark takes it back when l has room.
func (m *Machine[P]) park(l *lane[P], off int64, ts time.Time) {
	ms := ts.UnixMilli()
	if n := len(l.parked); n == 0 || !l.parked[n-1].extend(off, ms) {
		l.parked = append(l.parked, parkRun[P]{start: off, end: off + 1, read: m.cfg.Clock().UnixNano(), ts: ms})
	}
	m.parking.lanes[l] = struct{}{}
	m.parking.count++
}

// parkArrival reports whether a record arriving for lane l (nil: a key
// without one yet) parks: behind the key's parked records, beyond its
// refill cap, or beyond ParkAfter when the window is full and the
// partition starved.
func (m *Machine[P]) parkArrival(l *lane[P]) bool {
	return l != nil && m.parks() && (len(l.parked) > 0 || len(l.q) >= m.parking.refillCap ||
		len(l.q) >= m.parking.laneCap && m.residentWindow() && m.full() && m.starved())
}

// starved reports a partition short of work: fewer than ReadyFloor
// records ready to send.
func (m *Machine[P]) starved() bool {
	return m.ready.len()+len(m.injected.ready) < m.cfg.ReadyFloor
}

// evictFor makes room when the partition is starved: keys holding more
// than ParkAfter records in memory park the last of them (the records
// stay pending, their values dropped), a tenth of the window and
// needBytes of the Budget at least, so the next arrivals find room too.
// It reports whether any record was parked.
func (m *Machine[P]) evictFor(needBytes int64) bool {
	if !m.parks() || !m.starved() || m.stopped {
		return false
	}
	target, n := max(m.cfg.MaxWindow/10, 1), int64(0)
	freed := int64(0)
	for _, l := range m.lanes {
		if len(l.q) <= m.parking.laneCap {
			continue
		}
		k, b := m.parkTail(l)
		n += int64(k)
		freed += b
		if n >= target && freed >= needBytes {
			break
		}
	}
	return n > 0
}

// parkTail parks the records l holds in memory beyond laneCap, from its
// tail, before its parked ones: they come after every record it keeps in
// memory and before any it parked already, so its order holds. It stops
// at a record out, taken, injected or ready, and when the ParkBudget is
// used up. It returns the records parked and the Budget bytes freed.
func (m *Machine[P]) parkTail(l *lane[P]) (n int, freed int64) {
	cut := len(l.q)
	for cut > m.parking.laneCap {
		e := l.q[cut-1]
		if e.state != stateQueued || e.extra {
			break
		}
		if !m.holdings.reservePark() {
			break
		}
		cut--
	}
	if cut == len(l.q) {
		return 0, 0
	}
	now := m.cfg.Clock().UnixNano()
	runs := make([]parkRun[P], 0, len(l.q)-cut)
	for _, e := range l.q[cut:] {
		ts := e.Time.UnixMilli()
		if k := len(runs); k == 0 || !runs[k-1].extend(e.Offset, ts) {
			runs = append(runs, parkRun[P]{start: e.Offset, end: e.Offset + 1, read: now, ts: ts})
		}
		freed += m.drop(e)
		n++
	}
	clear(l.q[cut:])
	l.q = l.q[:cut]
	l.parked = append(runs, l.parked...)
	m.parking.lanes[l] = struct{}{}
	m.parking.count += int64(n)
	m.parking.evicted += int64(n)
	m.version++
	return n, freed
}

// Evicted returns how many records were parked from memory to make room
// for other keys (see ParkAfter); they count in Parked too.
func (m *Machine[P]) Evicted() int64 { return m.parking.evicted }

// parkRun is a run of consecutive offsets of one lane that are parked, or
// a record injected behind parked ones.
type parkRun[P any] struct {
	start, end int64 // [start, end)
	// read is when the first was read, unix ns; ts its timestamp, unix ms.
	read, ts int64
	extra    *Entry[P]
}

// extend adds off, of timestamp ts (unix ms), to r when it follows r's
// last offset. A run carries its first record's timestamp for the
// retention guard, so it takes in only records within a second of it.
func (r *parkRun[P]) extend(off, ts int64) bool {
	if r.extra != nil || r.end != off || absMS(ts-r.ts) >= 1000 {
		return false
	}
	r.end++
	r.ts = min(r.ts, ts)
	return true
}

// absMS is |d|.
func absMS(d int64) int64 {
	if d < 0 {
		return -d
	}
	return d
}

// unpark counts n parked records gone: taken back, or let go.
func (m *Machine[P]) unpark(n int64) {
	m.parking.count -= n
	m.holdings.releaseParked(n)
}

// Reread returns the offset from which a fetch made again would find the
// parked records that keys have room for now (at most half their cap in
// memory), -1 when none has. Unpark takes them.
func (m *Machine[P]) Reread() int64 {
	if m.parking.count == 0 || !m.claimed || m.stopped || m.full() {
		return -1
	}
	low := int64(-1)
	for l := range m.parking.lanes {
		if (len(l.q) > m.parking.laneCap/2 && l.rescue == 0) || l.parked[0].extra != nil || m.laneFrozen(l) {
			continue
		}
		if s := l.parked[0].start; low < 0 || s < low {
			low = s
		}
	}
	return low
}

// RereadAfter returns the lowest next parked offset at or after pos of
// the keys with any room left (fewer than their refill cap in memory),
// -1 when none: a fetch made again that reached pos goes on while it
// finds some, and ends when not.
func (m *Machine[P]) RereadAfter(pos int64) int64 {
	if m.parking.count == 0 || !m.claimed || m.stopped || m.full() {
		return -1
	}
	low := int64(-1)
	for l := range m.parking.lanes {
		if (len(l.q) >= m.parking.refillCap && l.rescue == 0) || l.parked[0].extra != nil || m.laneFrozen(l) {
			continue
		}
		if s := l.parked[0].start; s >= pos && (low < 0 || s < low) {
			low = s
		}
	}
	return low
}

// Unpark takes back parked records fetched again, in offset order. A
// record is taken when it is the next parked one of its key and the key
// has room: fewer than a tenth of the window (at least four times
// ParkAfter) in memory, its bytes in the Budget, and the window not full.
// Any other record is ignored (not parked, taken already, or its key
// still full), so the fetch may start anywhere and repeat itself. It
// returns how many it took.
func (m *Machine[P]) Unpark(recs []Record[P]) int {
	took := 0
	for i := range recs {
		if m.parking.count == 0 {
			break
		}
		r := &recs[i]
		if r.Control || r.Key == nil {
			continue
		}
		l := m.lanes[string(r.Key)]
		if l == nil || len(l.parked) == 0 {
			continue
		}
		run := &l.parked[0]
		if run.extra != nil || run.start != r.Offset || m.laneFrozen(l) {
			continue
		}
		// An expiring record is taken whatever room its key has.
		rescued := l.rescue != 0 && run.ts < l.rescue
		if !rescued && (len(l.q) >= m.parking.refillCap || m.full()) {
			continue
		}
		hold, ok := m.holdings.reserve(r.Bytes)
		if !ok {
			break
		}
		e := &Entry[P]{Offset: r.Offset, Payload: r.Payload, size: r.Size, bytes: hold, lane: l,
			Accepted: time.Unix(0, run.read), Time: r.Time}
		if m.sharing != nil || rescued {
			// A rescued record has no lane to tell share its key.
			e.hash = m.hash(r.Key, r.Offset)
		}
		if run.start++; run.start == run.end {
			l.parked[0] = parkRun[P]{}
			l.parked = l.parked[1:]
		}
		m.unpark(1)
		m.pending[e.Offset] = e
		if rescued {
			// Out of its key's turn: it waits for nothing.
			e.lane = nil
			e.expiring = true
			m.makeReady(e)
		} else {
			m.join(l, e)
		}
		m.promote(l)
		if len(l.parked) == 0 || l.parked[0].extra != nil || l.parked[0].ts >= l.rescue {
			l.rescue = 0
		}
		if len(l.q) == 0 && len(l.parked) == 0 {
			delete(m.lanes, l.key)
		}
		took++
	}
	if took > 0 {
		m.version++
		m.settle()
	}
	return took
}

// promote moves records injected behind parked ones into l's queue once
// no parked offset is before them.
func (m *Machine[P]) promote(l *lane[P]) {
	for len(l.parked) > 0 && l.parked[0].extra != nil {
		e := l.parked[0].extra
		l.parked[0] = parkRun[P]{}
		l.parked = l.parked[1:]
		m.join(l, e)
	}
	if len(l.parked) == 0 {
		l.parked = nil
		delete(m.parking.lanes, l)
	}
}

// ParkedLostBelow lets go of the parked records below off, the log start:
// retention deleted them before they could be read again, so they count
// as done, never delivered. It returns how many there were; the caller
// must say so loudly. Records in memory are not lost: they are delivered.
func (m *Machine[P]) ParkedLostBelow(off int64) int64 {
	if m.parking.count == 0 {
		return 0
	}
	var lost int64
	for l := range m.parking.lanes {
		for len(l.parked) > 0 && l.parked[0].extra == nil && l.parked[0].start < off {
			r := &l.parked[0]
			end := min(r.end, off)
			m.addAcked(r.start, end)
			lost += end - r.start
			m.unpark(end - r.start)
			if r.start = end; r.start == r.end {
				l.parked[0] = parkRun[P]{}
				l.parked = l.parked[1:]
			}
		}
		l.rescue = 0
		m.promote(l)
		if len(l.q) == 0 && len(l.parked) == 0 {
			delete(m.lanes, l.key)
		}
	}
	if lost > 0 {
		m.version++
		m.settle()
	}
	return lost
}

// Parked returns how many records are parked by offset.
func (m *Machine[P]) Parked() int64 { return m.parking.count }

// OldestParked returns when the oldest parked record was read, zero when
// none is parked.
func (m *Machine[P]) OldestParked() time.Time {
	var oldest int64
	for l := range m.parking.lanes {
		for _, r := range l.parked {
			if r.extra == nil {
				if oldest == 0 || r.read < oldest {
					oldest = r.read
				}
				break
			}
		}
	}
	if oldest == 0 {
		return time.Time{}
	}
	return time.Unix(0, oldest)
}

// HoldingParked returns the key of the parked record the watermark waits
// for and when it was read; false when the watermark's record is not
// parked.
func (m *Machine[P]) HoldingParked() (key string, read time.Time, ok bool) {
	if m.watermark < 0 || m.parking.count == 0 || m.pending[m.watermark] != nil {
		return "", time.Time{}, false
	}
	for l := range m.parking.lanes {
		if r := l.parked[0]; r.extra == nil && r.start == m.watermark {
			return l.key, time.Unix(0, r.read), true
		}
	}
	return "", time.Time{}, false
}
