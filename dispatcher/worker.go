package dispatcher

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/keyhook/keyhook/internal/backoff"
	"github.com/keyhook/keyhook/keyrange"
	"github.com/keyhook/keyhook/partition"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
)

// record is a fetched record as its partition tracks it until it is
// acked. Only the worker's loop touches one: the pool gets a job instead
// (handoff.go).
type record = partition.Entry[*kgo.Record]

// worker owns one assigned partition: a loop around the partition's
// state machine that feeds it fetched records and delivery results, hands
// what it makes ready to the delivery pool, pauses and resumes the fetch
// as it decides, and hands its snapshots to the node's flusher. Its loop
// never waits on the tracker: claims and flushes run elsewhere and come
// back as events, so a slow Redis cannot stall deliveries. Other
// goroutines talk to it through push, pushResult, pushFlushed and do, and
// read what it publishes.
//
// The loop has a goroutine only while it has something to do: one with
// nothing but events to wait for (mail, its clock, the end of its
// context) returns, and the next event starts it again (dormant.go). A node's
// idle partitions thus cost no goroutine; with a thousand subscriptions
// they were most of its goroutines.
type worker struct {
	g   *group
	tp  topicPartition
	pk  tracking.PartitionKey
	gen int32
	log *slog.Logger
	// attrs are the partition's metric attributes.
	attrs attribute.Set
	// topicID is the topic's Kafka ID as of the assignment, "" unknown;
	// the claim drops tracking state of another ID (a deleted topic).
	topicID string

	// mail is what other goroutines hand the loop (mailbox.go), functions
	// to run on it (do) included; outbox names the records out with the
	// delivery pool (handoff.go).
	mail   mailbox
	outbox outbox
	// loop gives the loop a goroutine only while it has something to do
	// (dormant.go).
	loop *dormant
	// due is set by the clock's timer when it fires; the loop clears it.
	due atomic.Bool

	// rs gives up the key ranges the group's balancer took away
	// (reshape.go), rr re-reads parked records (reread.go), guard lets
	// records about to be deleted out of their key's turn (retention.go).
	rs    reshaper
	rr    rereader
	guard retentionGuard
	// src is where a cursor's records come from (catchup.go); unused
	// when the group reads with a client of its own.
	src cursorSource

	// retired is set when the group hands the partition over: the final
	// state is written by the handover, no longer by the flusher.
	retired atomic.Bool
	// bg tracks the claims in flight; run waits for them before it ends.
	bg sync.WaitGroup

	// committed is the last Kafka commit known: the group's offset at
	// assignment, then every commit the committer makes. The loop hands
	// it to the machine.
	committed atomic.Int64
	// highWatermark is the log end as of the last fetch, set by the poll;
	// logStart the log start offset.
	highWatermark, logStart atomic.Int64
	// pub is what the loop publishes for the committer, stats and gauges.
	pub published

	ctx    context.Context
	cancel context.CancelFunc
	// attemptCtx bounds the attempts of the partition's deliveries: it
	// ends when the partition is lost or fenced, not at the drain
	// deadline, so a graceful handover lets an attempt in flight finish
	// (each has its own timeout) rather than repeat it on the next owner.
	attemptCtx     context.Context
	cancelAttempts context.CancelFunc
	// deliverCtx bounds the rest of a delivery (waits, dead-letter
	// writes); it also ends at the drain deadline.
	deliverCtx    context.Context
	cancelDeliver context.CancelFunc
	// noRetries is set once the partition drains or is lost: its
	// deliveries make no further attempt (see pool.stopRetries).
	noRetries atomic.Bool
	done      chan struct{}

	// Loop-owned state.
	m *partition.Machine[*kgo.Record]
	// foreign and superseded are the machine's counts of records of
	// other sharers and of records conflation superseded, as last
	// reported to the metrics.
	foreign, superseded int64
	// flushedNotes is the count of progress notes the last flush wrote.
	flushedNotes uint64
	epoch        int64
	paused       bool      // the fetch is paused in the client
	offer        []*record // the batch offered to the pool
	drained      chan struct{}
	// flushing: a snapshot is with the flusher; claiming: a claim is in
	// flight. Either way flush hands over no new snapshot.
	flushing, claiming bool
	// flushWait, when set, is closed when the snapshot with the flusher
	// comes back (a handover waits for it).
	flushWait chan struct{}
	// claimAt is when the next try of a first claim is due (zero: none);
	// claimWait paces the tries after refusals.
	claimAt   time.Time
	claimWait *backoff.Backoff
	// turnCount counts the loop's iterations (a test reads how often an
	// idle partition wakes); begun is set once the first turn ran.
	turnCount uint64
	begun     bool
	// keys is what the flushes wrote of the keys not flowing (keys.go).
	keys keyList

	// lease is the ownership lease (lease.go); its clock is the worker's.
	lease lease
	// clk wakes the loop when something is due (clock.go); batchTimer
	// when a batch waited long enough (batchArmed: it is set).
	clk        *clock
	batchTimer *time.Timer
	batchArmed bool
	// refused: the renewer had the claim refused; the next flush writes.
	refused bool
	// hold holds back a write while the answers of what was sent are due.
	hold flushHold
}

// progress is a record's latest attempt.
type progress struct {
	attempts int
	status   int
	err      string
	next     time.Time
}

// claimResult is what a claim in flight hands back to the loop.
type claimResult struct {
	c      tracking.Claim
	ranges keyrange.Set
	err    error
	// sent is when the claim was sent (see worker.since).
	sent time.Duration
}

// releaseResult is what a release of drained ranges hands back.
type releaseResult struct {
	flush flushResult
	err   error
}

// published mirrors the machine's positions for other goroutines.
type published struct {
	watermark atomic.Int64 // -1 unknown
	next      atomic.Int64 // fetch position, -1 before the first record
	pending   atomic.Int64
	// commitable is the offset the committer may commit, -1 none.
	commitable atomic.Int64
	// ranges are the key ranges the node delivers, nil before the claim;
	// epoch the claim's.
	ranges atomic.Pointer[keyrange.Set]
	epoch  atomic.Int64
	// notOwned counts the records read that other sharers deliver.
	notOwned atomic.Int64
	// holdingSince is when the record holding the watermark was read,
	// unix ns, 0 none.
	holdingSince atomic.Int64
	// parked counts the records parked by offset; reread those read
	// again to take them back.
	parked, reread atomic.Int64
	// guardAt is when the retention guard acts on the oldest pending
	// record, unix ns, 0 unknown or none.
	guardAt atomic.Int64
	// detached is set while a cursor's worker reads on its own instead
	// of the reader's shared stream (catchup.go).
	detached atomic.Bool
	paused   atomic.Bool
	fenced   atomic.Bool
	claimed  atomic.Bool
}

// partitionConfig is the state machine configuration of s's partitions.
func partitionConfig(s *subscription.Subscription, maxWindow int64, parkAfter int) partition.Config {
	cfg := partition.Config{MaxWindow: maxWindow, ParkAfter: parkAfter, Conflate: s.Conflate}
	switch s.Ordering {
	case subscription.OrderPartition:
		cfg.Ordering = partition.OrderPartition
	case subscription.OrderNone:
		cfg.Ordering = partition.OrderNone
	}
	if b := s.Batch; b.Enabled() {
		cfg.Batch = partition.Batch{MaxRecords: b.MaxRecords, MaxBytes: b.MaxBytes, MaxWait: time.Duration(b.MaxWaitMS) * time.Millisecond}
		if cfg.Batch.MaxBytes <= 0 {
			cfg.Batch.MaxBytes = subscription.DefaultBatchBytes
		}
	}
	return cfg
}

func newWorker(g *group, tp topicPartition, gen int32, ranges keyrange.Set) *worker {
	m, err := partition.New[*kgo.Record](g.partition)
	if err != nil {
		panic("dispatcher: partition config validated by newGroup: " + err.Error())
	}
	w := &worker{
		g: g, tp: tp, pk: g.partitionKey(tp), gen: gen,
		log:   g.log.With("topic", tp.topic, "partition", tp.partition),
		attrs: partitionAttrs(g.sub.ID, tp),
		rr:    rereader{batches: make(chan rereadBatch, 1)},
		src:   cursorSource{offered: -1, batches: make(chan catchupBatch, 1)},
		done:  make(chan struct{}),
		m:     m,
		lease: newLease(g.n.cfg.lease()),
	}
	// No goroutine before start: what comes before it waits in the mail.
	w.loop = newDormant(g.n.spawn.spawn, w.turns, func() bool { return len(w.mail.wake) > 0 || w.ctx.Err() != nil }, w.finish)
	w.mail = newMailbox(w.loop.kick)
	// A whole partition is nil, as the machine wants it.
	if !ranges.IsFull() {
		w.rs.assigned = ranges
	}
	w.committed.Store(-1)
	w.highWatermark.Store(-1)
	w.pub.watermark.Store(-1)
	w.pub.next.Store(-1)
	w.pub.commitable.Store(-1)
	w.pub.paused.Store(true)
	return w
}

func (w *worker) start(parent context.Context) {
	w.ctx, w.cancel = context.WithCancel(parent)
	w.attemptCtx, w.cancelAttempts = context.WithCancel(w.ctx)
	w.deliverCtx, w.cancelDeliver = context.WithCancel(w.attemptCtx)
	context.AfterFunc(w.deliverCtx, func() { w.g.pool.stopRetries(w) })
	w.clk = newClock(func() {
		w.due.Store(true)
		w.signal()
	})
	w.batchTimer = time.NewTimer(time.Hour)
	w.batchTimer.Stop()
	w.claimWait = backoff.MustNew(backoff.Config{Initial: 100 * time.Millisecond, Max: 5 * time.Second})
	// The first claim is due at once.
	w.claimAt = time.Now()
	w.due.Store(true)
	w.g.n.renewer.add(w)
	// The loop wakes to end with the context.
	context.AfterFunc(w.ctx, w.signal)
	w.mail.signal()
	w.loop.begin()
}

// setBase records the group's committed offset for the partition (negative
// when there is none and the reset policy applies).
func (w *worker) setBase(o int64) {
	if o >= 0 {
		w.committed.Store(o)
		w.signal()
	}
}

// push hands fetched records to the worker; it never blocks the poll loop.
func (w *worker) push(rs []*kgo.Record) {
	w.mail.postFetched(rs)
}

func (w *worker) pushResult(r result) {
	w.mail.postResult(r)
}

// noteProgress records a record's latest attempt (from the pool).
func (w *worker) noteProgress(rec *kgo.Record, p progress) {
	w.mail.noteProgress(rec, p)
}

// holding describes the record the watermark waits for, nil when none,
// and the count of progress notes it includes.
func (w *worker) holding(now time.Time) (*tracking.Holding, uint64) {
	e := w.m.Holding()
	w.mail.mu.Lock()
	defer w.mail.mu.Unlock()
	if e == nil {
		// The record may be parked: its key's earlier ones went, and it
		// waits to be read again.
		key, read, ok := w.m.HoldingParked()
		if !ok {
			return nil, w.mail.notes
		}
		h := &tracking.Holding{Offset: w.m.Watermark(), Key: keyText([]byte(key)), Since: read, Behind: int64(w.m.Pending() - 1)}
		h.Parked, h.OldestParked = w.m.Parked(), w.m.OldestParked()
		return h, w.mail.notes
	}
	h := &tracking.Holding{Offset: e.Offset, Key: keyText(e.Payload.Key), Since: e.Accepted, Behind: int64(w.m.Pending() - 1)}
	if p := w.m.Parked(); p > 0 {
		h.Parked, h.OldestParked = p, w.m.OldestParked()
	}
	if e.Out() {
		h.Dispatched = e.Dispatched
	}
	if p, ok := w.mail.progress[e.Payload]; ok {
		h.Attempts, h.LastStatus, h.LastError = p.attempts, p.status, p.err
		if p.next.After(now) {
			h.NextAttempt = p.next
		}
	}
	return h, w.mail.notes
}

// keyText is a record key as the status shows it: text, cut to 128 bytes.
func keyText(k []byte) string {
	const max = 128
	if len(k) > max {
		k = k[:max]
	}
	return strings.ToValidUTF8(string(k), "\ufffd")
}

// since is the worker's monotonic clock: the time since it was made.
func (w *worker) since() time.Duration { return w.lease.since() }

// owned reports whether a delivery of the partition may start: the
// tracker confirmed the claim within the lease, and the coordinator the
// node's membership (group.live). Either alone can be out of date: a node
// cut from Kafka still writes its state, one cut from Redis still
// heartbeats.
func (w *worker) owned() bool {
	now := time.Now()
	return w.lease.heldAt(now) && w.g.live.confirmedAt(now)
}

func (w *worker) signal() { w.mail.signal() }

// do runs f on the worker's loop and waits for it; false if the loop ended
// without running it.
func (w *worker) do(f func()) bool {
	ran := make(chan struct{})
	w.mail.postCtrl(func() { f(); close(ran) })
	select {
	case <-ran:
		return true
	case <-w.done:
		select {
		case <-ran:
			return true
		default:
			return false
		}
	}
}

// finish releases what the loop held once its context ended.
func (w *worker) finish() {
	w.clk.stop()
	w.batchTimer.Stop()
	w.g.n.renewer.remove(w)
	// What the partition held goes back to the node's budget.
	w.m.Close()
	w.releaseClaimHeld()
	// A claim in flight ends with w.ctx; the loop outlives none.
	w.bg.Wait()
	close(w.done)
}

// turns runs the loop's turns until it has nothing to do but wait for an
// event (false), or its context ended (true).
func (w *worker) turns() (ended bool) {
	for {
		if w.ctx.Err() != nil {
			return true
		}
		w.turnCount++
		if !w.begun {
			// Until the claim succeeds the partition is paused: without
			// the acked set this node would redeliver what the previous
			// owner finished.
			w.begun = true
			w.applyPause()
		}
		// A send into the pool's slots takes a delivery slot: the case
		// is ready only while one is free, so what waits for one stays
		// in the machine.
		var send chan<- struct{}
		var head *record
		var sendBatch chan<- struct{}
		leased := w.owned()
		if w.g.sub.Batch.Enabled() {
			if w.offer == nil {
				var wait time.Duration
				w.offer, wait = w.m.Assemble()
				if wait > 0 {
					w.batchTimer.Reset(wait)
					w.batchArmed = true
				}
			}
			if w.offer != nil && !w.m.Stopped() && leased {
				sendBatch = w.g.pool.slots
			}
		} else if e := w.m.Peek(); e != nil && leased {
			send, head = w.g.pool.slots, e
		}
		// Redriven dead letters, injected on their key's lane by the
		// group's redriver, go to its redrive slots (see redrive.go).
		var sendRedrive chan<- struct{}
		var redrive *record
		if e := w.m.PeekExtra(); e != nil && leased {
			sendRedrive, redrive = w.g.pool.redriveSlots, e
		}
		var rereads <-chan rereadBatch
		if w.rr.pass != nil {
			rereads = w.rr.batches
		}
		catchups := w.catchupBatches()
		if send == nil && sendRedrive == nil && sendBatch == nil && !w.batchArmed && rereads == nil && catchups == nil {
			// Nothing waits for the loop but events, which start it.
			select {
			case <-w.mail.wake:
				w.takeMail()
			default:
				return false
			}
		} else {
			select {
			case <-w.ctx.Done():
				return true
			case <-w.mail.wake:
				w.takeMail()
			case send <- struct{}{}:
				w.dispatch(head) // head is what Peek returned
				w.dispatchReady()
			case sendRedrive <- struct{}{}:
				w.dispatchRedrive(redrive) // redrive is what PeekExtra returned
			case sendBatch <- struct{}{}:
				w.dispatchBatch()
			case <-w.batchTimer.C:
				// The oldest ready record waited long enough: the loop
				// offers the batch as it is.
				w.batchArmed = false
			case b := <-rereads:
				w.takeReread(b)
			case b := <-catchups:
				w.takeCatchup(b)
			}
		}
		if w.cursor() {
			w.manageCatchup()
		}
		w.lease.noteConfirmed(w.log)
		w.flush()
		w.publish()
		w.publishHolding()
		now := time.Now()
		w.clk.arm(w.nextDue(now), now)
	}
}

// takeMail handles what came: what came due on the clock, the mail, and
// the functions to run on the loop.
func (w *worker) takeMail() {
	if w.due.Swap(false) {
		w.clk.fired()
		w.housekeep(time.Now())
	}
	w.m.SetCommitted(w.committed.Load())
	w.processResults()
	w.processTracking()
	w.processInbox()
	w.reshape()
	fs, refused := w.mail.takeCtrl()
	w.refused = w.refused || refused
	for _, f := range fs {
		f()
	}
}

// ranges returns the key ranges the node delivers as last published.
func (w *worker) ranges() keyrange.Set {
	if r := w.pub.ranges.Load(); r != nil {
		return *r
	}
	return nil
}

// commits reports whether this node commits the partition to Kafka: the
// owner of the hash 0, so that a shared partition has one committer.
func (w *worker) commits() bool {
	r := w.pub.ranges.Load()
	return r != nil && r.Contains(0)
}

// processInbox offers fetched records to the machine, which accepts them
// while the window has room and holds the rest until acks make room; the
// fetch pauses meanwhile. The window is thus a hard bound on what is
// dispatched and tracked, whatever size the fetches have.
func (w *worker) processInbox() {
	for _, rs := range w.mail.takeFetched() {
		if w.cursor() {
			w.takeShared(rs)
			continue
		}
		w.m.Offer(w.machineRecords(rs))
	}
	if f := w.m.Foreign(); f > w.foreign {
		w.g.tel.notOwned.Add(context.Background(), f-w.foreign, metric.WithAttributeSet(w.attrs))
		w.foreign = f
		w.pub.notOwned.Store(f)
	}
	if s := w.m.Superseded(); s > w.superseded {
		w.g.tel.superseded.Add(context.Background(), s-w.superseded, metric.WithAttributeSet(w.attrs))
		w.superseded = s
	}
}

// machineRecords is rs as the partition's machine sees them, filtered.
func (w *worker) machineRecords(rs []*kgo.Record) []partition.Record[*kgo.Record] {
	recs := make([]partition.Record[*kgo.Record], len(rs))
	for i, r := range rs {
		recs[i] = w.g.filter(machineRecord(r))
	}
	return recs
}

// machineRecord is r as the partition's machine sees it.
func machineRecord(r *kgo.Record) partition.Record[*kgo.Record] {
	return partition.Record[*kgo.Record]{
		Offset: r.Offset, Key: r.Key, Control: r.Attrs.IsControl(), Size: len(r.Value),
		Bytes: recordBytes(r), Time: r.Timestamp, Payload: r,
	}
}

// recordOverhead approximates what a fetched record holds beyond its
// bytes: the kgo.Record, its entry in the partition and the lane.
const recordOverhead = 400

// recordBytes is what r holds in memory while pending.
func recordBytes(r *kgo.Record) int64 {
	n := recordOverhead + len(r.Key) + len(r.Value) + len(r.Topic)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value) + 32
	}
	return int64(n)
}

func (w *worker) processResults() {
	for _, res := range w.mail.takeResults() {
		e, ok := w.outbox.take(res.rec)
		if !ok {
			w.log.Error("a delivery result for a record not out; ignored", "offset", res.rec.Offset)
			continue
		}
		w.m.Done(e, res.acked)
		w.hold.answer()
	}
	if w.drained != nil && w.m.InFlight() == 0 {
		close(w.drained)
		w.drained = nil
	}
}

// pushFlushed hands the worker the outcome of a flush.
func (w *worker) pushFlushed(r flushResult) {
	w.mail.postFlush(r)
}

// processTracking applies what the tracker answered: claims and flushes.
func (w *worker) processTracking() {
	cs, fs, rs := w.mail.takeTracking()
	for _, r := range cs {
		w.claimed(r)
	}
	for _, r := range fs {
		w.flushed(r)
	}
	for _, r := range rs {
		w.released(r)
	}
}

// publish mirrors the machine for other goroutines and carries out its
// fetch decision.
func (w *worker) publish() {
	w.pub.watermark.Store(w.m.Watermark())
	w.pub.next.Store(w.m.Next())
	w.pub.pending.Store(int64(w.m.Pending()))
	w.pub.parked.Store(w.m.Parked())
	w.pub.claimed.Store(w.m.Claimed())
	c, ok := w.m.CommitCandidate()
	if !ok {
		c = -1
	}
	w.pub.commitable.Store(c)
	w.applyPause()
}

// applyPause pauses or resumes fetching the partition as the machine says.
func (w *worker) applyPause() {
	want := w.m.Paused()
	if want == w.paused {
		return
	}
	w.paused = want
	w.pub.paused.Store(want)
	if w.cursor() {
		// The reader's fetch goes on: a cursor without room detaches
		// instead (catchup.go).
		return
	}
	ps := map[string][]int32{w.tp.topic: {w.tp.partition}}
	if want {
		w.g.client().PauseFetchPartitions(ps)
	} else {
		w.g.client().ResumeFetchPartitions(ps)
	}
}

// flush hands the partition's state to the node's flusher when it
// changed; the loop calls it after every turn, so a change waits for the
// flusher's next round, not for a tick of its own too. A partition whose
// previous flush or a claim is still under way stays dirty: its snapshot
// goes once the answer is back, and is newer.
func (w *worker) flush() {
	w.m.SetCommitted(w.committed.Load())
	if w.flushing || w.claiming || w.rs.releasing || w.retired.Load() {
		return
	}
	noted := w.mail.noted() != w.flushedNotes
	live := w.m.Claimed() && !w.m.Fenced()
	// While the coordinator has not confirmed the node's membership, the
	// group may be giving the partition away: the state is written every
	// round, so a new owner's claim fences the attempts in flight here
	// within a round, not at the next change.
	member := true
	now := time.Now()
	if live {
		w.g.live.check(w.g.log, now)
		member = w.g.live.confirmedAt(now)
	}
	urgent := live && (noted || !member || w.refused || w.lease.runsLow())
	if !w.m.Dirty() && !w.m.Behind() && !urgent {
		return
	}
	if !urgent && !w.m.Behind() && w.hold.hold(now, w.m.Pending()) {
		return
	}
	if live {
		w.lease.logLapse(w.log)
	}
	w.refused = false
	w.flushing = true
	w.hold.wrote()
	w.g.n.flusher.submit(w.flushReq())
}

// flushReq returns the state to write now. The snapshot's acked set is
// the machine's own, which the loop goes on changing: the request holds a
// copy.
func (w *worker) flushReq() flushReq {
	s := w.m.Snapshot()
	holding, notes := w.holding(time.Now())
	f := tracking.Flush{
		Epoch:     w.epoch,
		Holding:   holding,
		Ranges:    s.Ranges,
		Acked:     s.Acked.Clone(),
		Watermark: s.Watermark,
		Fetched:   s.Next,
		Committed: s.Committed,
		Pending:   int64(s.Pending),
		InFlight:  int64(s.InFlight),
		Keys:      int64(s.Keys),
		Oldest:    s.Oldest,
		Stalled:   w.keys.next(w, w.epoch, time.Now()),
	}
	s.Acked = nil
	return flushReq{w: w, f: f, snap: s, notes: notes, sent: w.since()}
}

// flushed applies the outcome of a flush.
func (w *worker) flushed(r flushResult) {
	w.flushing = false
	w.keys.flushed(r.err == nil)
	w.wakeHandover()
	if w.m.Fenced() {
		return
	}
	switch err := r.err; {
	case errors.Is(err, errRetired):
	case err == nil:
		w.lease.renew(r.sent, w.log)
		// What lets the committer move: the commit never passes what the
		// tracker holds, over every sharer.
		w.m.FlushedMerged(r.snap, r.merged)
		w.flushedNotes = max(w.flushedNotes, r.notes)
		// Another sharer may be the one committing: its commits come
		// back through the tracker.
		if r.committed > w.committed.Load() {
			w.committedTo(r.committed)
		}
	case errors.Is(err, tracking.ErrStateLost):
		// Redis lost the state (restart without persistence): claim again;
		// the next flush writes what this node knows. Its acks are true, so
		// nothing is lost, and the new epoch still fences any older owner.
		w.log.Warn("tracking state lost; claiming again")
		w.claim()
	case errors.Is(err, tracking.ErrFenced):
		// Another claim is stored. It is a newer owner's, or a zombie's
		// that re-claimed after Redis lost the state; claiming again with
		// this node's current generation tells them apart: the store
		// refuses it only in favour of a newer generation.
		w.claim()
	default:
		// The flusher said it, once for the round: the next flush
		// retries.
	}
}

// wakeHandover lets a handover waiting for the tracker go on.
func (w *worker) wakeHandover() {
	if w.flushWait != nil {
		close(w.flushWait)
		w.flushWait = nil
	}
}

// publishRanges publishes the ranges the machine delivers.
func (w *worker) publishRanges() {
	r := w.m.Ranges()
	w.pub.ranges.Store(&r)
}

// becomeFenced stops all work on a partition another owner has claimed:
// deliveries are aborted, fetching pauses, and the committer skips it. The
// group's rebalance will take the partition away.
func (w *worker) becomeFenced(err error) {
	if w.m.Fenced() {
		return
	}
	w.log.Warn("partition fenced by a newer owner; stopping work on it", "err", err)
	w.m.Fence()
	w.pub.fenced.Store(true)
	w.cancelAttempts()
	w.publish()
}

// commitCandidate returns the offset to commit, if it is ahead of the last
// commit: the machine's candidate as the loop last published it. Only the
// committing sharer has one.
func (w *worker) commitCandidate() (int64, bool) {
	if w.pub.fenced.Load() || !w.commits() {
		return 0, false
	}
	c := w.pub.commitable.Load()
	return c, c >= 0 && c > w.committed.Load()
}

// committedTo records a successful Kafka commit; the loop trims below it.
func (w *worker) committedTo(o int64) {
	for {
		cur := w.committed.Load()
		if o <= cur || w.committed.CompareAndSwap(cur, o) {
			break
		}
	}
	w.signal()
}

// drain stops dispatching, ends at once the deliveries waiting for a
// retry (no further attempt: their last one failed, so the next owner
// repeats nothing the endpoint took), and waits for the rest until
// deadline. Past it, what waits (a dead-letter write) is aborted and stays
// pending, but attempts in flight still run to their own timeout: aborting
// one the endpoint is processing would have the next owner send it again.
func (w *worker) drain(deadline time.Time) {
	var drained chan struct{}
	if !w.do(func() {
		w.m.Stop()
		w.publish()
		if w.m.InFlight() > 0 {
			w.drained = make(chan struct{})
			drained = w.drained
		}
	}) {
		return
	}
	w.g.pool.stopRetries(w)
	if drained == nil {
		return
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-drained:
	case <-t.C:
		w.log.Warn("drain deadline passed; waiting for the attempts in flight to end")
		w.cancelDeliver()
		// Every attempt in flight began before the drain, so its own
		// timeout ends it by now; one still running waited for its
		// endpoint's limiter and is cut.
		cut := time.NewTimer(w.g.attemptTimeout())
		defer cut.Stop()
		select {
		case <-drained:
		case <-cut.C:
			w.log.Warn("attempts still in flight a request timeout past the drain deadline; aborting them")
			w.cancelAttempts()
			<-drained
		}
	}
}

// abort cancels in-flight deliveries at once (the partition is lost).
func (w *worker) abort() {
	w.cancelAttempts()
}

// handover retires the worker from the flusher and returns its final
// state to write; false when it has none to write (never claimed, or
// fenced). Dispatching stops; deliveries still in flight finish or were
// aborted by the caller. A snapshot already with the flusher is waited
// for, until ctx ends: written after the final state, its older acks
// would make the next owner deliver again what was acked in between.
func (w *worker) handover(ctx context.Context) (req flushReq, ok bool) {
	var sent chan struct{}
	if !w.do(func() {
		w.retired.Store(true)
		w.m.Stop()
		w.processResults()
		w.processTracking()
		if w.flushing || w.rs.releasing {
			w.flushWait = make(chan struct{})
			sent = w.flushWait
		}
	}) {
		return req, false
	}
	if sent != nil {
		select {
		case <-sent:
		case <-ctx.Done():
		}
	}
	w.do(func() {
		w.processResults()
		w.processTracking()
		w.m.SetCommitted(w.committed.Load())
		w.m.Touch()
		if w.m.Dirty() {
			req, ok = w.flushReq(), true
		}
		w.publish()
	})
	return req, ok
}

// handedOver applies the outcome of the final flush and returns the claim
// to release, false when the partition is not this node's to release.
func (w *worker) handedOver(r flushResult) (rel tracking.PartitionRelease, ok bool) {
	w.do(func() {
		switch err := r.err; {
		case err == nil:
			w.m.FlushedMerged(r.snap, r.merged)
		case errors.Is(err, tracking.ErrFenced):
			w.becomeFenced(err)
		default:
			// The next owner delivers again what was acked since the last
			// successful flush; the commit stays at that flush.
			w.log.Warn("final flush failed", "err", err)
		}
		w.publish()
		if w.m.Claimed() && !w.m.Fenced() {
			rel, ok = tracking.PartitionRelease{Key: w.pk, Epoch: w.epoch}, true
		}
	})
	return rel, ok
}

func (w *worker) stats() PartitionStats {
	return PartitionStats{
		Topic:     w.tp.topic,
		Partition: w.tp.partition,
		Watermark: w.pub.watermark.Load(),
		Committed: w.committed.Load(),
		Paused:    w.pub.paused.Load(),
		Pending:   w.pub.pending.Load(),
		Claimed:   w.pub.claimed.Load() && !w.pub.fenced.Load(),
		Ranges:    w.ranges(),
		NotOwned:  w.pub.notOwned.Load(),
		Parked:    w.pub.parked.Load(),
		Reread:    w.pub.reread.Load(),
		Detached:  w.pub.detached.Load(),
	}
}
