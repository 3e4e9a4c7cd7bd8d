package partition

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/keyhook/keyhook/keyrange"
	"github.com/keyhook/keyhook/tracking/offsets"
)

// The model test drives a Machine with random sequences of fetches (with
// gaps, transaction markers and refetches), dispatches, acks, aborts,
// flushes, commits, drains and claims over offsets a previous owner acked,
// and checks every step against the guarantees the machine defends:
//
//   - per-key order: a record goes out only after every earlier record of
//     its lane was acked;
//   - at-least-once: nothing a previous owner acked, no marker and nothing
//     below the start is delivered; everything else is, exactly once when
//     nothing fails;
//   - the commit is never past an offset that is not acked, never ahead of
//     a flush, and never moves back;
//   - the window bounds the records held (in memory, when keys park);
//   - parked records come back through fetches made again from where
//     Reread says, or from anywhere, repeated: each goes out once, in its
//     key's order;
//   - shared (a part of the key hashes claimed, others' records counted
//     as done): only the node's records go out, floors are respected,
//     a range being given up sends nothing new, and the acked set a flush
//     writes holds true acks only;
//   - injected records (not offsets of the partition) go out once, after
//     their key's records that were pending when they were injected and
//     before its later ones, and are never batched;
//   - records found about to fall out of retention (Expire) are marked
//     expiring and go out of their key's turn, parked ones taken back
//     whatever room their key has; the others keep their order;
//   - records the filter rejected (Skip) are never dispatched, never hold
//     the watermark once fetched, and leave the order of the others as it
//     is; each one of this node's is counted once (Filtered).

// logRecord is one offset of the simulated partition log.
type logRecord struct {
	offset  int64
	key     []byte
	control bool
	// skip: the subscription's filter rejects it.
	skip bool
}

// model is the simulated world around one Machine.
type model struct {
	t       testing.TB
	rnd     *rand.Rand
	cfg     Config
	m       *Machine[int64]
	log     []logRecord // in offset order, with gaps
	logEnd  int64
	fetchAt int // index in log of the next record to fetch
	base    int64
	preAck  offsets.Set // acked by a previous owner

	delivered   map[int64]int // offset → times acked
	dispatched  map[int64]bool
	out         []*Entry[int64] // dispatched, no result yet
	stopped     bool
	lastCommit  int64
	lastWM      int64
	flushedWM   int64
	steps       int
	now         time.Time
	maxPending  int
	batchesSeen int
	// pendingBatch is the batch being checked: earlier records of a lane
	// in it go out with it, acked in order.
	pendingBatch []*Entry[int64]
	// abortedLanes: once a lane's record was aborted, its later records
	// out are aborted too (a delivery that stops stops its whole batch).
	abortedLanes map[string]bool
	budget       *MemoryBudget
	parkBudget   *MemoryBudget
	// unparked counts the records Unpark took back.
	unparked int
	// ranges are the hashes this node delivers (nil: all), frozen those
	// it is giving up; floors what a previous owner delivered per range.
	ranges, frozen keyrange.Set
	floors         []Floor
	// claimed are the ranges claimed at first.
	claimed keyrange.Set
	// injects are the records Inject queued, by payload (-1, -2, …).
	injects map[int64]*injectRec
	// expired counts the records delivered marked expiring.
	expired int
}

// fetchedSkip reports whether r is a record the filter rejected that the
// machine has taken in: acked from then on.
func (md *model) fetchedSkip(r logRecord) bool { return r.skip && r.offset < md.m.Next() }

// injectRec is one injected record as the model follows it.
type injectRec struct {
	laned   bool
	laneKey string
	// next is the fetch position when it was injected: records of its
	// lane below it go first, the others after it.
	next int64
	// sent: dispatched; ended: its result came (whatever it was);
	// dropped: Shrink gave it back with its lane.
	sent, ended, dropped bool
	acks                 int
}

func newModel(t testing.TB, seed uint64, ordering Ordering, batch Batch, window int64) *model {
	rnd := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	md := &model{
		t: t, rnd: rnd,
		delivered:    map[int64]int{},
		dispatched:   map[int64]bool{},
		abortedLanes: map[string]bool{},
		injects:      map[int64]*injectRec{},
		lastCommit:   -1, lastWM: -1, flushedWM: -1,
		now: time.Unix(1_700_000_000, 0),
	}
	md.cfg = Config{Ordering: ordering, MaxWindow: window, Batch: batch, Clock: func() time.Time { return md.now }}
	if rnd.IntN(2) == 0 {
		// Keys park records beyond a few; a parked record costs little.
		md.cfg.ParkAfter, md.cfg.ParkedBytes = 1+rnd.IntN(4), 1+int64(rnd.IntN(3))
		if rnd.IntN(2) == 0 {
			md.parkBudget, _ = NewMemoryBudget(int64(4 + rnd.IntN(60)))
			md.cfg.ParkBudget = md.parkBudget
		}
	}
	if rnd.IntN(2) == 0 {
		// A node-wide byte budget, at least the largest record.
		md.budget, _ = NewMemoryBudget(int64(8 + rnd.IntN(60)))
		md.cfg.Budget = md.budget
	}
	m, err := New[int64](md.cfg)
	if err != nil {
		t.Fatal(err)
	}
	md.m = m
	// The log: offsets with gaps (compaction, aborted data), markers, a
	// few keys and keyless records.
	off := int64(rnd.IntN(50))
	n := 20 + rnd.IntN(200)
	keys := 1 + rnd.IntN(6)
	// Half the cases filter: a share of the records is rejected.
	skipOneIn := 0
	if rnd.IntN(2) == 0 {
		skipOneIn = 2 + rnd.IntN(4)
	}
	for range n {
		if rnd.IntN(8) == 0 {
			off += int64(1 + rnd.IntN(5))
		}
		r := logRecord{offset: off}
		switch {
		case rnd.IntN(12) == 0:
			r.control = true
		case rnd.IntN(6) == 0:
			// keyless
		default:
			r.key = fmt.Appendf(nil, "k%d", rnd.IntN(keys))
		}
		r.skip = !r.control && skipOneIn > 0 && rnd.IntN(skipOneIn) == 0
		md.log = append(md.log, r)
		off++
	}
	md.logEnd = off
	// Where the group resumes: nothing committed (the first record is the
	// start), or a commit somewhere in the log.
	md.base = -1
	if rnd.IntN(2) == 0 {
		md.base = md.log[rnd.IntN(len(md.log))].offset
		for md.fetchAt < len(md.log) && md.log[md.fetchAt].offset < md.base {
			md.fetchAt++
		}
	}
	// A previous owner acked some offsets at or above the base.
	if rnd.IntN(2) == 0 {
		for _, r := range md.log[md.fetchAt:] {
			if rnd.IntN(4) == 0 {
				md.preAck.AddOffset(r.offset)
			}
		}
	}
	// Shared: some of the key ranges, a floor on some of them.
	if ordering != OrderPartition && rnd.IntN(3) == 0 {
		parts := keyrange.Split(2 + rnd.IntN(3))
		var mine []keyrange.Range
		for _, r := range parts {
			if rnd.IntN(2) == 0 {
				mine = append(mine, r)
			}
			if rnd.IntN(3) == 0 {
				md.floors = append(md.floors, Floor{Range: r, Below: md.log[rnd.IntN(len(md.log))].offset})
			}
		}
		md.ranges, _ = keyrange.NewSet(mine...)
		if md.ranges == nil {
			md.ranges = keyrange.Set{parts[0]}
		}
	}
	return md
}

func (md *model) hash(r logRecord) uint16 {
	if md.cfg.Ordering == OrderNone {
		return keyrange.OfOffset(r.offset)
	}
	return keyrange.Of(r.key, r.offset)
}

// mine reports whether r is this node's to deliver under ranges.
func (md *model) mine(r logRecord, ranges keyrange.Set) bool {
	return ranges == nil || r.control || ranges.Contains(md.hash(r))
}

// belowFloor reports whether a previous owner delivered r.
func (md *model) belowFloor(r logRecord) bool {
	for _, f := range md.floors {
		if f.Range.Contains(md.hash(r)) {
			return r.offset < f.Below
		}
	}
	return false
}

// settled reports whether r needs no delivery by anyone: a marker,
// below the start, acked by a previous owner, or delivered.
func (md *model) settled(r logRecord) bool {
	return r.offset < md.start() || r.control || md.preAck.Contains(r.offset) || md.belowFloor(r) || md.delivered[r.offset] > 0 || md.fetchedSkip(r)
}

func (md *model) start() int64 {
	if md.base >= 0 {
		return md.base
	}
	return md.log[0].offset
}

// step runs one random operation.
func (md *model) step(op byte) {
	md.steps++
	md.now = md.now.Add(time.Duration(md.rnd.IntN(20)) * time.Millisecond)
	switch op % 10 {
	case 0, 1:
		if md.m.Parked() > 0 && md.rnd.IntN(2) == 0 {
			md.reread()
		} else {
			md.fetch()
		}
	case 2, 3, 4:
		md.dispatch()
	case 5, 6, 7:
		md.complete(true)
	case 8:
		// Flushes and commits run on their own clocks: a commit may come
		// long after the last flush, with many acks in between.
		if md.rnd.IntN(2) == 0 {
			md.flush()
		} else {
			md.commit()
		}
	case 9:
		switch md.rnd.IntN(12) {
		case 0:
			md.refetch()
		case 1:
			if !md.stopped && md.rnd.IntN(4) == 0 {
				md.m.Stop()
				md.stopped = true
			}
		case 2:
			if md.stopped {
				md.complete(false)
			}
		case 3:
			md.freeze()
		case 4:
			md.shrink()
		case 5:
			md.inject()
		case 6:
			md.expire()
		default:
			md.flush()
		}
	}
	md.check()
}

func (md *model) record(r logRecord) Record[int64] {
	size := 1 + int(r.offset%7)
	return Record[int64]{Offset: r.offset, Key: r.key, Control: r.control, Skip: r.skip, Size: size, Bytes: int64(size), Time: md.recTime(r.offset), Payload: r.offset}
}

// recTime is the timestamp of the record at off: 50 ms apart, so that
// parked runs (a second of timestamps at most) hold about twenty.
func (md *model) recTime(off int64) time.Time {
	return time.Unix(1_600_000_000, 0).Add(time.Duration(off) * 50 * time.Millisecond)
}

// expire finds the pending records older than one of the log's, as the
// retention guard does, a few a call.
func (md *model) expire() {
	if md.fetchAt == 0 {
		return
	}
	cutoff := md.recTime(md.log[md.rnd.IntN(md.fetchAt)].offset)
	n := 1 + md.rnd.IntN(4)
	if got := md.m.Expire(cutoff, n); got > n {
		md.t.Fatalf("step %d: Expire found %d records, at most %d asked", md.steps, got, n)
	}
}

// expiring reports whether the pending record at off is marked expiring:
// out of its key's turn.
func (md *model) expiring(off int64) bool {
	e := md.m.pending[off]
	return e != nil && e.Expiring()
}

func (md *model) fetch() {
	if md.fetchAt >= len(md.log) {
		return
	}
	if md.m.Paused() && md.rnd.IntN(4) != 0 {
		return // a paused partition mostly gets nothing; records in flight may still land
	}
	n := 1 + md.rnd.IntN(20)
	var recs []Record[int64]
	for ; n > 0 && md.fetchAt < len(md.log); n-- {
		recs = append(recs, md.record(md.log[md.fetchAt]))
		md.fetchAt++
	}
	md.m.Offer(recs)
}

// reread fetches again from where the machine's parked records are (or,
// now and then, from anywhere before the fetch position) and hands what
// it read to Unpark.
func (md *model) reread() {
	from := md.m.Reread()
	if from < 0 || md.rnd.IntN(5) == 0 {
		if md.fetchAt == 0 {
			return
		}
		from = md.log[md.rnd.IntN(md.fetchAt)].offset
	}
	var recs []Record[int64]
	for i := 0; i < md.fetchAt && len(recs) < 1+md.rnd.IntN(30); i++ {
		if md.log[i].offset >= from {
			recs = append(recs, md.record(md.log[i]))
		}
	}
	md.unparked += md.m.Unpark(recs)
}

// refetch offers records again (a fetch from an older position).
func (md *model) refetch() {
	if md.fetchAt == 0 {
		return
	}
	from := md.rnd.IntN(md.fetchAt)
	var recs []Record[int64]
	for i := from; i < md.fetchAt && i < from+10; i++ {
		recs = append(recs, md.record(md.log[i]))
	}
	// A refetch arrives only once the backlog was accepted; a fetch session
	// never hands records out of order.
	if md.m.Backlog() == 0 {
		md.m.Offer(recs)
	}
}

func (md *model) laneOf(off int64) (string, bool) {
	r := md.find(off)
	switch {
	case md.cfg.Ordering == OrderNone:
		return "", false
	case md.cfg.Ordering == OrderPartition:
		return "", true
	case r.key == nil:
		return "", false
	}
	return string(r.key), true
}

func (md *model) find(off int64) logRecord {
	for _, r := range md.log {
		if r.offset == off {
			return r
		}
	}
	md.t.Fatalf("offset %d not in the log", off)
	return logRecord{}
}

// lookup returns the record at off, false for a gap or the log end.
func (md *model) lookup(off int64) (logRecord, bool) {
	for _, r := range md.log {
		if r.offset == off {
			return r, true
		}
	}
	return logRecord{}, false
}

// sent checks one dispatch against order and at-least-once.
func (md *model) sent(e *Entry[int64]) {
	off := e.Offset
	r := md.find(off)
	switch {
	case r.control:
		md.t.Fatalf("step %d: marker %d dispatched", md.steps, off)
	case r.skip:
		md.t.Fatalf("step %d: offset %d, rejected by the filter, dispatched", md.steps, off)
	case md.preAck.Contains(off) || md.belowFloor(r):
		md.t.Fatalf("step %d: offset %d acked by the previous owner dispatched again", md.steps, off)
	case !md.mine(r, md.ranges):
		md.t.Fatalf("step %d: offset %d of another sharer's range dispatched", md.steps, off)
	case md.frozen != nil && md.frozen.Contains(md.hash(r)):
		md.t.Fatalf("step %d: offset %d of a range being given up dispatched", md.steps, off)
	case off < md.start():
		md.t.Fatalf("step %d: offset %d below the start %d dispatched", md.steps, off, md.start())
	case md.dispatched[off]:
		md.t.Fatalf("step %d: offset %d dispatched twice", md.steps, off)
	case md.stopped:
		md.t.Fatalf("step %d: offset %d dispatched after Stop", md.steps, off)
	case e.Payload != off:
		md.t.Fatalf("step %d: entry %d carries payload %d", md.steps, off, e.Payload)
	}
	if key, ok := md.laneOf(off); ok && !e.Expiring() {
		for _, o := range md.log {
			if o.offset >= off {
				break
			}
			if o.control || o.skip || o.offset < md.start() || md.preAck.Contains(o.offset) || md.belowFloor(o) || md.expiring(o.offset) {
				continue
			}
			if k, ok := md.laneOf(o.offset); ok && k == key && md.delivered[o.offset] == 0 && !md.inBatchBefore(o.offset) {
				md.t.Fatalf("step %d: offset %d of lane %q dispatched before %d was acked", md.steps, off, key, o.offset)
			}
		}
		if id := md.injectedBefore(key, off); id != 0 {
			md.t.Fatalf("step %d: offset %d of lane %q dispatched before the record injected before it (%d) ended", md.steps, off, key, id)
		}
	}
	md.dispatched[off] = true
	md.out = append(md.out, e)
}

// inject queues a record that is not an offset of the partition on a
// key of the log (or none), as a dead letter delivered again is.
func (md *model) inject() {
	var key []byte
	if md.rnd.IntN(4) != 0 {
		key = md.log[md.rnd.IntN(len(md.log))].key
	}
	x := &injectRec{next: md.m.Next()}
	switch {
	case md.cfg.Ordering == OrderPartition:
		x.laned = true
	case md.cfg.Ordering == OrderKey && key != nil:
		x.laned, x.laneKey = true, string(key)
	}
	id := -int64(len(md.injects) + 1)
	md.injects[id] = x
	md.m.Inject(key, id)
}

// sentExtra checks the dispatch of an injected record: once, and only
// after its lane's records that were pending before it and the records
// injected on it before.
func (md *model) sentExtra(e *Entry[int64]) {
	x := md.injects[e.Payload]
	switch {
	case x == nil:
		md.t.Fatalf("step %d: injected entry of unknown payload %d dispatched", md.steps, e.Payload)
	case x.sent || x.ended || x.dropped:
		md.t.Fatalf("step %d: injected record %d dispatched twice", md.steps, e.Payload)
	case md.stopped:
		md.t.Fatalf("step %d: injected record %d dispatched after Stop", md.steps, e.Payload)
	}
	if x.laned {
		for _, o := range md.log {
			if x.next < 0 || o.offset >= x.next {
				break
			}
			if md.settled(o) || !md.mine(o, md.ranges) || md.expiring(o.offset) {
				continue
			}
			if k, ok := md.laneOf(o.offset); ok && k == x.laneKey {
				md.t.Fatalf("step %d: injected record %d of lane %q dispatched before %d was acked", md.steps, e.Payload, k, o.offset)
			}
		}
		for id, y := range md.injects {
			if id > e.Payload && y.laned && y.laneKey == x.laneKey && !y.ended && !y.dropped {
				md.t.Fatalf("step %d: injected record %d of lane %q dispatched before %d, injected before it, ended", md.steps, e.Payload, x.laneKey, id)
			}
		}
	}
	x.sent = true
	md.out = append(md.out, e)
}

// injectedBefore returns an injected record of lane key that must end
// before off goes out and has not, 0 when none.
func (md *model) injectedBefore(key string, off int64) int64 {
	for id, y := range md.injects {
		if y.laned && y.laneKey == key && y.next >= 0 && off >= y.next && !y.ended && !y.dropped {
			return id
		}
	}
	return 0
}

// laneOfEntry is laneOf for an entry out, injected or not.
func (md *model) laneOfEntry(e *Entry[int64]) (string, bool) {
	if x := md.injects[e.Payload]; e.Offset < 0 && x != nil {
		return x.laneKey, x.laned
	}
	return md.laneOf(e.Offset)
}

func (md *model) inBatchBefore(off int64) bool {
	for _, e := range md.pendingBatch {
		if e.Offset == off {
			return true
		}
	}
	return false
}

func (md *model) dispatch() {
	for range md.rnd.IntN(3) {
		e := md.m.PeekExtra()
		if e == nil {
			break
		}
		if err := md.m.DispatchExtra(e); err != nil {
			md.t.Fatal(err)
		}
		md.sentExtra(e)
	}
	if md.cfg.Batch.MaxRecords > 0 {
		batch, wait := md.m.Assemble()
		if batch == nil {
			if wait > 0 {
				md.now = md.now.Add(wait)
			}
			return
		}
		md.batchesSeen++
		if len(batch) > md.cfg.Batch.MaxRecords {
			md.t.Fatalf("batch of %d records, max %d", len(batch), md.cfg.Batch.MaxRecords)
		}
		md.m.DispatchBatch(batch)
		md.pendingBatch = batch
		for _, e := range batch {
			if e.Extra() {
				md.t.Fatalf("step %d: injected record %d in a batch", md.steps, e.Payload)
			}
			md.sent(e)
		}
		md.pendingBatch = nil
		return
	}
	for range 1 + md.rnd.IntN(4) {
		e := md.m.Peek()
		if e == nil {
			return
		}
		if err := md.m.Dispatch(e); err != nil {
			md.t.Fatal(err)
		}
		md.sent(e)
	}
}

// complete reports the result of one dispatched record that may finish
// now: the first of its lane among those out.
func (md *model) complete(acked bool) {
	if len(md.out) == 0 {
		return
	}
	var candidates []int
	seen := map[string]bool{}
	for i, e := range md.out {
		key, ok := md.laneOfEntry(e)
		if ok && seen[key] {
			continue
		}
		if ok {
			seen[key] = true
		}
		candidates = append(candidates, i)
	}
	i := candidates[md.rnd.IntN(len(candidates))]
	e := md.out[i]
	md.out = append(md.out[:i], md.out[i+1:]...)
	key, laned := md.laneOfEntry(e)
	if laned && md.abortedLanes[key] {
		acked = false
	}
	if laned && !acked {
		md.abortedLanes[key] = true
	}
	if x := md.injects[e.Payload]; e.Extra() && x != nil {
		// Whatever its result, it leaves its lane.
		x.ended = true
		if acked {
			x.acks++
		}
	} else if acked {
		md.delivered[e.Offset]++
		if e.Expiring() {
			md.expired++
		}
	} else {
		// Aborted: it stays pending and is never sent again by this owner.
		delete(md.dispatched, e.Offset)
	}
	md.m.Done(e, acked)
}

// freeze starts giving up some of the node's ranges (a shared partition
// only, as the dispatcher does).
func (md *model) freeze() {
	if md.cfg.Ordering == OrderPartition || md.stopped {
		return
	}
	cur := md.ranges
	if cur == nil {
		cur = keyrange.Full()
	}
	var keep keyrange.Set
	for _, r := range keyrange.Split(1 + md.rnd.IntN(4)) {
		if md.rnd.IntN(2) == 0 {
			keep = keep.Union(keyrange.Set{r})
		}
	}
	keep = keep.Intersect(cur)
	md.m.Freeze(keep)
	md.frozen = cur.Minus(keep)
	if md.frozen.IsEmpty() {
		md.frozen = nil
	}
}

// shrink lets the frozen ranges go once nothing of them is in flight; the
// flush before it must hold them as not delivered.
func (md *model) shrink() {
	if md.frozen == nil {
		return
	}
	if md.m.Draining() > 0 {
		if _, err := md.m.Shrink(); err == nil {
			md.t.Fatalf("step %d: shrink with records of the frozen ranges in flight", md.steps)
		}
		return
	}
	md.flush()
	dropped, err := md.m.Shrink()
	if err != nil {
		md.t.Fatal(err)
	}
	for _, e := range dropped {
		x := md.injects[e.Payload]
		if x == nil || x.sent && !x.ended {
			md.t.Fatalf("step %d: shrink gave back injected record %d, unknown or in flight", md.steps, e.Payload)
		}
		x.dropped = true
	}
	if md.ranges == nil {
		md.ranges = keyrange.Full()
	}
	md.ranges = md.ranges.Minus(md.frozen)
	if md.ranges == nil {
		md.ranges = keyrange.Set{}
	}
	md.frozen = nil
	if !md.m.Ranges().Equal(md.ranges) {
		md.t.Fatalf("step %d: ranges %v after shrink, want %v", md.steps, md.m.Ranges(), md.ranges)
	}
}

func (md *model) flush() {
	if !md.m.Dirty() {
		return
	}
	s := md.m.Snapshot()
	// What a flush writes is a fact other owners rely on: its acked set
	// holds no record that is not delivered, and its watermark passes
	// none of its ranges' records that are not.
	for _, r := range md.log {
		if s.Acked.Contains(r.offset) && !md.settled(r) {
			md.t.Fatalf("step %d: flushed acked set holds offset %d, which nobody delivered", md.steps, r.offset)
		}
	}
	if u := md.firstUnacked(s.Ranges); s.Watermark > u {
		md.t.Fatalf("step %d: flushed watermark %d of ranges %v passes offset %d, which is not acked", md.steps, s.Watermark, s.Ranges, u)
	}
	if s.Watermark >= 0 {
		md.flushedWM = max(md.flushedWM, s.Watermark)
	}
	// The other sharers are simulated as done with everything: the
	// merged watermark is this node's.
	md.m.FlushedMerged(s, s.Watermark)
}

func (md *model) commit() {
	c, ok := md.m.CommitCandidate()
	if !ok {
		return
	}
	if c <= md.lastCommit {
		md.t.Fatalf("step %d: commit candidate %d does not move past %d", md.steps, c, md.lastCommit)
	}
	if c > md.flushedWM {
		md.t.Fatalf("step %d: commit candidate %d ahead of the flushed watermark %d", md.steps, c, md.flushedWM)
	}
	if u := md.firstUnacked(md.ranges); c > u {
		md.t.Fatalf("step %d: commit candidate %d passes offset %d, which is not acked", md.steps, c, u)
	}
	md.lastCommit = c
	md.m.SetCommitted(c)
}

// firstUnacked is the lowest offset of ranges (nil: all) at or above the
// start that must still be delivered (fetched or not), or the log end.
func (md *model) firstUnacked(ranges keyrange.Set) int64 {
	for _, r := range md.log {
		if md.settled(r) || !md.mine(r, ranges) {
			continue
		}
		return r.offset
	}
	return md.logEnd
}

func (md *model) check() {
	m := md.m
	if m.residentWindow() {
		// An expiring record is taken back whatever room there is.
		p := 0
		for _, e := range m.pending {
			if !e.Expiring() {
				p++
			}
		}
		if p > int(md.cfg.MaxWindow) {
			md.t.Fatalf("step %d: %d records in memory, window %d", md.steps, p, md.cfg.MaxWindow)
		}
		for _, l := range m.lanes {
			n := 0
			for _, e := range l.q {
				if !e.extra {
					n++
				}
			}
			if m.parks() && n > m.parking.refillCap {
				md.t.Fatalf("step %d: lane %q holds %d records in memory, cap %d", md.steps, l.key, n, m.parking.refillCap)
			}
		}
	} else if p := m.Pending(); p > int(md.cfg.MaxWindow) {
		md.t.Fatalf("step %d: %d records pending, window %d", md.steps, p, md.cfg.MaxWindow)
	}
	md.maxPending = max(md.maxPending, m.Pending())
	if md.budget != nil {
		if md.budget.Used() != m.Held() || m.Held() > md.budget.Max() {
			md.t.Fatalf("step %d: budget used %d, machine holds %d, max %d", md.steps, md.budget.Used(), m.Held(), md.budget.Max())
		}
	}
	if md.parkBudget != nil && (md.parkBudget.Used() != m.ParkHeld() || m.ParkHeld() > md.parkBudget.Max()) {
		md.t.Fatalf("step %d: park budget used %d, machine holds %d, max %d", md.steps, md.parkBudget.Used(), m.ParkHeld(), md.parkBudget.Max())
	}
	wm := m.Watermark()
	if wm >= 0 {
		if wm < md.lastWM {
			md.t.Fatalf("step %d: watermark moved back from %d to %d", md.steps, md.lastWM, wm)
		}
		if u := md.firstUnacked(md.m.Ranges()); wm > u {
			md.t.Fatalf("step %d: watermark %d passes offset %d, which is not acked", md.steps, wm, u)
		}
		if r, ok := md.lookup(wm); ok && md.fetchedSkip(r) && md.mine(r, md.m.Ranges()) {
			md.t.Fatalf("step %d: watermark held at %d, a record the filter rejected", md.steps, wm)
		}
		md.lastWM = wm
	}
	if m.InFlight() != len(md.out) {
		md.t.Fatalf("step %d: machine has %d in flight, model %d", md.steps, m.InFlight(), len(md.out))
	}
	for off, n := range md.delivered {
		if n > 1 {
			md.t.Fatalf("step %d: offset %d acked %d times", md.steps, off, n)
		}
	}
}

// finish delivers everything left and checks that the partition ends
// complete: every record delivered once, watermark and commit at the end.
func (md *model) finish() {
	if md.stopped {
		// A drained owner hands over: what it had not acked stays pending.
		for len(md.out) > 0 {
			md.complete(md.rnd.IntN(2) == 0)
			md.check()
		}
		md.flush()
		md.commit()
		return
	}
	for guard := 0; ; guard++ {
		if guard > 100000 {
			md.t.Fatalf("no progress: watermark %d, log end %d, pending %d (parked %d, reread %d), backlog %d, budget %v", md.m.Watermark(), md.logEnd, md.m.Pending(), md.m.Parked(), md.m.Reread(), md.m.Backlog(), md.budget)
		}
		md.fetch()
		md.m.Refill()
		md.reread()
		md.dispatch()
		for len(md.out) > 0 {
			md.complete(true)
		}
		md.shrink()
		md.flush()
		md.commit()
		md.check()
		if md.fetchAt >= len(md.log) && md.m.Backlog() == 0 && md.m.Pending() == 0 && md.injectsOpen() == 0 {
			break
		}
	}
	for id, x := range md.injects {
		if !x.dropped && x.acks != 1 {
			md.t.Fatalf("injected record %d delivered %d times", id, x.acks)
		}
	}
	// Records the filter rejected count once each: this node's at the
	// end at least, at most those of the ranges it claimed (it may have
	// taken some in before giving their range up).
	filtered, claimedFiltered := int64(0), int64(0)
	for _, r := range md.log {
		if r.skip && r.offset >= md.start() && !md.preAck.Contains(r.offset) && !md.belowFloor(r) && md.mine(r, md.claimed) {
			claimedFiltered++
		}
		if r.offset < md.start() || r.control || md.preAck.Contains(r.offset) || md.belowFloor(r) || !md.mine(r, md.ranges) {
			continue
		}
		if r.skip {
			if md.delivered[r.offset] != 0 {
				md.t.Fatalf("offset %d, rejected by the filter, delivered", r.offset)
			}
			filtered++
			continue
		}
		if md.delivered[r.offset] != 1 {
			md.t.Fatalf("offset %d delivered %d times", r.offset, md.delivered[r.offset])
		}
	}
	if got := md.m.Filtered(); got < filtered || got > claimedFiltered {
		md.t.Fatalf("Filtered() = %d, want from %d to %d", got, filtered, claimedFiltered)
	}
	if wm := md.m.Watermark(); wm != md.logEnd {
		md.t.Fatalf("final watermark %d, log end %d", wm, md.logEnd)
	}
	if md.m.Held() != 0 {
		md.t.Fatalf("%d bytes held with nothing pending", md.m.Held())
	}
	if md.lastCommit != md.logEnd {
		md.t.Fatalf("final commit %d, log end %d", md.lastCommit, md.logEnd)
	}
	if md.m.Paused() && md.m.Next()-md.m.Watermark() <= md.cfg.MaxWindow/2 {
		md.t.Fatalf("paused with an empty window")
	}
	if md.m.Parked() != 0 {
		md.t.Fatalf("%d records still parked", md.m.Parked())
	}
}

// injectsOpen counts the injected records whose delivery has not ended.
func (md *model) injectsOpen() int {
	n := 0
	for _, x := range md.injects {
		if !x.ended && !x.dropped {
			n++
		}
	}
	return n
}

// run plays one whole case: optional commit before the claim, records
// that arrive before it, the claim, then ops.
func (md *model) run(ops []byte) {
	if md.base >= 0 {
		md.m.SetCommitted(md.base)
	}
	if md.rnd.IntN(3) == 0 {
		md.fetch() // fetched before the claim: held, not accepted
		if md.m.Pending() != 0 {
			md.t.Fatalf("%d records accepted before the claim", md.m.Pending())
		}
		if !md.m.Paused() {
			md.t.Fatal("an unclaimed partition is not paused")
		}
	}
	md.claimed = md.ranges
	if md.ranges != nil || md.floors != nil {
		md.m.ClaimRanges(md.preAck.Clone(), md.ranges, md.floors)
	} else {
		md.m.Claim(md.preAck.Clone())
	}
	for _, op := range ops {
		md.step(op)
	}
	md.finish()
}

// modelCase decodes fuzz input into a case: its settings, then the ops.
func modelCase(t testing.TB, data []byte) (*model, []byte) {
	var hdr [12]byte
	copy(hdr[:], data)
	seed := binary.LittleEndian.Uint64(hdr[:8])
	ordering := Ordering(hdr[8] % 3)
	var batch Batch
	if hdr[9]%3 == 0 {
		batch = Batch{MaxRecords: 1 + int(hdr[9]%7), MaxBytes: int(hdr[10] % 16), MaxWait: time.Duration(hdr[10]%4) * 10 * time.Millisecond}
	}
	window := int64(1 + hdr[11]%40)
	var ops []byte
	if len(data) > len(hdr) {
		ops = data[len(hdr):]
	}
	return newModel(t, seed, ordering, batch, window), ops
}

// FuzzMachine explores op sequences; its seeds run in every `go test`.
func FuzzMachine(f *testing.F) {
	f.Add([]byte("\x01\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x05\x00\x02\x05\x00\x02\x05\x08"))
	f.Add([]byte("\x02\x00\x00\x00\x00\x00\x00\x00\x01\x00\x07\x02\x00\x00\x00\x02\x02\x05\x05\x05\x08\x09\x09"))
	f.Add([]byte("\x03\x00\x00\x00\x00\x00\x00\x00\x02\x03\x03\x0a\x00\x00\x02\x02\x02\x05\x05\x08\x09\x00\x02\x05"))
	f.Fuzz(func(t *testing.T, data []byte) {
		md, ops := modelCase(t, data)
		md.run(ops)
	})
}

// TestMachineModel runs many random cases across orderings, batching and
// windows. The count of cases and steps is logged (go test -v).
func TestMachineModel(t *testing.T) {
	cases := 3000
	if testing.Short() {
		cases = 300
	}
	steps, batches, unparked, evicted, injected, expired, filtered := 0, 0, 0, int64(0), 0, 0, int64(0)
	rnd := rand.New(rand.NewPCG(42, 7))
	for i := range cases {
		data := make([]byte, 12+rnd.IntN(400))
		for j := range data {
			data[j] = byte(rnd.IntN(256))
		}
		md, ops := modelCase(t, data)
		md.run(ops)
		steps += md.steps
		batches += md.batchesSeen
		unparked += md.unparked
		evicted += md.m.Evicted()
		for _, x := range md.injects {
			injected += x.acks
		}
		expired += md.expired
		filtered += md.m.Filtered()
		if t.Failed() {
			t.Fatalf("case %d failed", i)
		}
	}
	t.Logf("state machine model: %d cases, %d steps, %d batches, %d records parked and taken back, %d of them parked from memory to make room, %d injected records delivered, %d records delivered out of turn as expiring",
		cases, steps, batches, unparked, evicted, injected, expired)
	if unparked == 0 {
		t.Fatal("no record was parked and taken back: the cases do not exercise parking")
	}
	if evicted == 0 {
		t.Fatal("no record was parked from memory: the cases do not exercise a starved full window")
	}
	if injected == 0 {
		t.Fatal("no injected record was delivered: the cases do not exercise Inject")
	}
	if expired == 0 {
		t.Fatal("no expiring record was delivered: the cases do not exercise Expire")
	}
	if filtered == 0 {
		t.Fatal("no record was filtered: the cases do not exercise Skip")
	}
}
