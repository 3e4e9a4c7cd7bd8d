package dispatcher

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
	"github.com/keyhook/keyhook/tracking/offsets"
)

// record is one fetched record on its way to the endpoint.
type record struct {
	w          *worker
	r          *kgo.Record
	lane       *lane // nil when the record has no lane (ordering none, no key)
	dispatched time.Time
	// taken: the record went out in a batch behind its lane's head, so it
	// must not be made ready again when the head is acked.
	taken bool
}

// lane is the FIFO of one key's pending records; only its head is in flight.
type lane struct {
	key string
	q   []*record
}

// result is what the delivery pool hands back to a worker.
type result struct {
	rec *record
	// acked: delivered or dead-lettered. False means the attempt was
	// aborted (shutdown, lost partition): the record stays pending.
	acked bool
}

// worker owns one assigned partition. Its loop goroutine owns all the
// partition's state; other goroutines talk to it through push, results and
// do.
type worker struct {
	g   *group
	tp  topicPartition
	pk  tracking.PartitionKey
	gen int32
	log *slog.Logger
	// attrs are the partition's metric attributes.
	attrs attribute.Set

	mu      sync.Mutex
	inbox   [][]*kgo.Record
	results []result
	wake    chan struct{}
	ctrl    chan func()

	base        atomic.Int64 // committed offset at assignment, -1 unknown
	watermark   atomic.Int64 // lowest offset not acked, -1 unknown
	flushedWM   atomic.Int64 // watermark of the last successful flush, -1 none
	committedAt atomic.Int64 // last offset this node committed to Kafka, -1 none
	// For gauges, published by the loop.
	highWatermark atomic.Int64 // the partition's log end as of the last fetch, -1 unknown
	nextOffset    atomic.Int64 // fetch position, -1 before the first record
	pendingCount  atomic.Int64
	fenced        atomic.Bool
	pausedFlag    atomic.Bool
	ctx           context.Context
	cancel        context.CancelFunc
	deliverCtx    context.Context
	cancelDeliver context.CancelFunc
	done          chan struct{}

	// Loop-owned state.
	claimed  bool
	epoch    int64
	next     int64 // next offset expected from the fetch, -1 before the first
	low      int64 // every offset below is done (committed or before base), -1 unknown
	acked    offsets.Set
	pending  map[int64]*record
	lanes    map[string]*lane
	ready    []*record
	inflight int
	// Batching: the batch offered to the pool, and since when records wait.
	offer      []*record
	readySince time.Time
	batchTimer *time.Timer
	draining   bool
	drained    chan struct{}
	dirty      bool
}

func newWorker(g *group, tp topicPartition, gen int32) *worker {
	w := &worker{
		g: g, tp: tp, pk: g.partitionKey(tp), gen: gen,
		log:     g.log.With("topic", tp.topic, "partition", tp.partition),
		attrs:   partitionAttrs(g.sub.ID, tp),
		wake:    make(chan struct{}, 1),
		ctrl:    make(chan func()),
		done:    make(chan struct{}),
		next:    -1,
		low:     -1,
		pending: make(map[int64]*record),
		lanes:   make(map[string]*lane),
	}
	w.base.Store(-1)
	w.watermark.Store(-1)
	w.flushedWM.Store(-1)
	w.committedAt.Store(-1)
	w.highWatermark.Store(-1)
	w.nextOffset.Store(-1)
	return w
}

func (w *worker) start(parent context.Context) {
	w.ctx, w.cancel = context.WithCancel(parent)
	w.deliverCtx, w.cancelDeliver = context.WithCancel(w.ctx)
	go w.run()
}

// setBase records the group's committed offset for the partition (negative
// when there is none and the reset policy applies).
func (w *worker) setBase(o int64) {
	if o < 0 {
		o = -1
	}
	w.base.Store(o)
	if o >= 0 {
		w.committedAt.Store(o)
	}
}

// push hands fetched records to the worker; it never blocks the poll loop.
func (w *worker) push(rs []*kgo.Record) {
	w.mu.Lock()
	w.inbox = append(w.inbox, rs)
	w.mu.Unlock()
	w.signal()
}

func (w *worker) pushResult(r result) {
	w.mu.Lock()
	w.results = append(w.results, r)
	w.mu.Unlock()
	w.signal()
}

func (w *worker) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// do runs f on the worker's loop and waits for it; false if the loop ended.
func (w *worker) do(f func()) bool {
	ran := make(chan struct{})
	select {
	case w.ctrl <- func() { f(); close(ran) }:
		<-ran
		return true
	case <-w.done:
		return false
	}
}

func (w *worker) run() {
	defer close(w.done)
	flushT := time.NewTicker(w.g.n.cfg.FlushInterval)
	defer flushT.Stop()
	claimRetry := time.NewTimer(0)
	defer claimRetry.Stop()
	claimWait := 100 * time.Millisecond
	// Until the claim succeeds the partition is paused: without the acked
	// set this node would redeliver what the previous owner finished.
	w.pause()
	batching := w.g.sub.Batch.Enabled()
	if batching {
		w.batchTimer = time.NewTimer(time.Hour)
		w.batchTimer.Stop()
		defer w.batchTimer.Stop()
	}
	var batchDue <-chan time.Time
	if w.batchTimer != nil {
		batchDue = w.batchTimer.C
	}
	for {
		var send chan<- *record
		var head *record
		var sendBatch chan<- []*record
		if w.claimed && !w.draining {
			switch {
			case batching:
				if w.offer == nil && len(w.ready) > 0 && w.batchReady() {
					w.offer = w.assemble()
				}
				if w.offer != nil {
					sendBatch = w.g.batches
				}
			case len(w.ready) > 0:
				send, head = w.g.jobs, w.ready[0]
			}
		}
		select {
		case <-w.ctx.Done():
			return
		case <-claimRetry.C:
			if w.claimed || w.fenced.Load() {
				continue
			}
			if err := w.claim(); err != nil {
				if errors.Is(err, tracking.ErrFenced) {
					w.becomeFenced(err)
					continue
				}
				w.log.Warn("claim failed; retrying", "err", err, "in", claimWait)
				claimRetry.Reset(claimWait)
				claimWait = min(2*claimWait, 5*time.Second)
				continue
			}
			w.processInbox()
			w.resumeIfRoom()
		case <-w.wake:
			w.processResults()
			if w.claimed {
				w.processInbox()
			}
		case send <- head:
			w.ready[0] = nil
			w.ready = w.ready[1:]
			w.inflight++
			head.dispatched = time.Now()
		case sendBatch <- w.offer:
			now := time.Now()
			for _, r := range w.offer {
				r.dispatched = now
			}
			w.inflight += len(w.offer)
			w.offer = nil
		case <-batchDue:
			// The oldest ready record waited long enough: the loop offers
			// the batch as it is.
		case f := <-w.ctrl:
			f()
		case <-flushT.C:
			w.flush()
		}
	}
}

// claim takes the partition over in the tracker: a new epoch fences the
// previous owner, and its acked offsets are skipped here.
func (w *worker) claim() error {
	ctx, cancel := context.WithTimeout(w.ctx, 5*time.Second)
	defer cancel()
	if _, gen := w.g.client().GroupMetadata(); gen > w.gen {
		w.gen = gen
	}
	c, err := w.g.n.tracker.Claim(ctx, w.pk, w.g.n.cfg.NodeID, w.gen)
	if err != nil {
		w.g.countError("claim")
		return err
	}
	w.epoch = c.Epoch
	if c.Acked != nil {
		w.acked.Union(c.Acked)
	}
	w.claimed = true
	w.dirty = true
	w.log.Info("partition claimed", "epoch", c.Epoch, "previous_owner", c.PrevOwner, "acked_ranges", c.Acked.Len())
	return nil
}

// processInbox accepts fetched records until the partition's window is
// full; the rest wait in the inbox (and fetching pauses) until acks move
// the watermark. The window is thus a hard bound on what is dispatched and
// tracked, whatever size the fetches have.
func (w *worker) processInbox() {
	w.mu.Lock()
	batches := w.inbox
	w.inbox = nil
	w.mu.Unlock()
	if len(batches) == 0 {
		return
	}
	w.updateWatermark()
	for i, rs := range batches {
		for j, r := range rs {
			if w.full() {
				rest := append([][]*kgo.Record{rs[j:]}, batches[i+1:]...)
				w.mu.Lock()
				w.inbox = append(rest, w.inbox...)
				w.mu.Unlock()
				w.updateWatermark()
				return
			}
			w.accept(r)
		}
	}
	w.updateWatermark()
}

// full reports whether the window between the watermark and the fetch
// position is used up.
func (w *worker) full() bool {
	wm := w.watermark.Load()
	if wm < 0 {
		wm = w.low // first batch: nothing acked yet
	}
	return wm >= 0 && w.next >= 0 && w.next-wm >= w.g.n.cfg.MaxWindow
}

// accept places one fetched record: skipped when already done, otherwise
// queued on its lane. Offsets the fetch stepped over (transaction markers,
// compaction, aborted data) are not records and count as acked, so they
// never stall the watermark.
func (w *worker) accept(r *kgo.Record) {
	off := r.Offset
	if w.low < 0 {
		// No commit to start from (reset policy): the first record is.
		w.low = off
	}
	if w.next < 0 {
		w.next = w.low
	}
	if off < w.next || off < w.low {
		return // a refetch of something already placed or committed
	}
	if off > w.next {
		w.acked.Add(w.next, off)
	}
	w.next = off + 1
	w.dirty = true
	if r.Attrs.IsControl() {
		w.acked.AddOffset(off)
		return
	}
	if w.acked.Contains(off) {
		return // acked by a previous owner
	}
	rec := &record{w: w, r: r}
	w.pending[off] = rec
	switch {
	case w.g.sub.Ordering == subscription.OrderNone:
	case w.g.sub.Ordering == subscription.OrderPartition:
		rec.lane = w.lane("")
	case r.Key != nil:
		rec.lane = w.lane(string(r.Key))
	}
	if rec.lane == nil {
		w.makeReady(rec)
		return
	}
	rec.lane.q = append(rec.lane.q, rec)
	if len(rec.lane.q) == 1 {
		w.makeReady(rec)
	}
}

// makeReady queues rec for dispatch: its lane's head, or a lane-less record.
func (w *worker) makeReady(rec *record) {
	if len(w.ready) == 0 && w.batchTimer != nil {
		w.readySince = time.Now()
	}
	w.ready = append(w.ready, rec)
}

// batchReady reports whether a batch should go now: enough records are
// ready, or the oldest waited MaxWaitMS. Otherwise it arms the timer that
// wakes the loop when the wait is over.
func (w *worker) batchReady() bool {
	b := w.g.sub.Batch
	wait := time.Duration(b.MaxWaitMS) * time.Millisecond
	if len(w.ready) >= b.MaxRecords || wait <= 0 {
		return true
	}
	left := wait - time.Since(w.readySince)
	if left <= 0 {
		return true
	}
	w.batchTimer.Reset(left)
	return false
}

// assemble takes a batch out of the ready records: lane heads in the order
// they became ready, each followed by the next records of its lane, in
// offset order, within the batch's record and byte limits.
func (w *worker) assemble() []*record {
	b := w.g.sub.Batch
	maxBytes := b.MaxBytes
	if maxBytes <= 0 {
		maxBytes = subscription.DefaultBatchBytes
	}
	out := make([]*record, 0, min(b.MaxRecords, len(w.ready)))
	size := 0
	fits := func(r *record) bool {
		return len(out) < b.MaxRecords && (len(out) == 0 || size+len(r.r.Value) <= maxBytes)
	}
	for len(w.ready) > 0 && fits(w.ready[0]) {
		head := w.ready[0]
		w.ready[0] = nil
		w.ready = w.ready[1:]
		head.taken = true
		out = append(out, head)
		size += len(head.r.Value)
		if head.lane == nil {
			continue
		}
		for _, f := range head.lane.q[1:] {
			if !fits(f) {
				break
			}
			f.taken = true
			out = append(out, f)
			size += len(f.r.Value)
		}
	}
	return out
}

func (w *worker) lane(key string) *lane {
	l := w.lanes[key]
	if l == nil {
		l = &lane{key: key}
		w.lanes[key] = l
	}
	return l
}

func (w *worker) processResults() {
	w.mu.Lock()
	rs := w.results
	w.results = nil
	w.mu.Unlock()
	if len(rs) == 0 {
		return
	}
	for _, res := range rs {
		w.inflight--
		if !res.acked {
			continue
		}
		rec := res.rec
		off := rec.r.Offset
		w.acked.AddOffset(off)
		delete(w.pending, off)
		w.dirty = true
		if l := rec.lane; l != nil {
			l.q[0] = nil
			l.q = l.q[1:]
			if len(l.q) == 0 {
				delete(w.lanes, l.key)
			} else if !l.q[0].taken {
				w.makeReady(l.q[0])
			}
		}
	}
	w.updateWatermark()
	if w.draining && w.inflight == 0 && w.drained != nil {
		close(w.drained)
		w.drained = nil
	}
}

// updateWatermark publishes the watermark for the committer and applies
// backpressure: with MaxWindow records between the watermark and the fetch
// position the partition pauses; at half of it, it resumes.
func (w *worker) updateWatermark() {
	if w.low < 0 {
		if base := w.base.Load(); base >= 0 {
			w.low = base
		} else {
			return
		}
	}
	if c := w.committedAt.Load(); c > w.low {
		w.low = c
	}
	w.acked.TrimBelow(w.low)
	wm := w.acked.Watermark(w.low)
	w.watermark.Store(wm)
	w.nextOffset.Store(w.next)
	w.pendingCount.Store(int64(len(w.pending)))
	if w.next < 0 {
		return
	}
	if w.full() {
		w.pause()
	} else if w.next-wm <= w.g.n.cfg.MaxWindow/2 {
		w.resumeIfRoom()
	}
}

func (w *worker) pause() {
	if w.pausedFlag.Swap(true) {
		return
	}
	w.g.client().PauseFetchPartitions(map[string][]int32{w.tp.topic: {w.tp.partition}})
}

func (w *worker) resumeIfRoom() {
	if !w.claimed || w.draining || w.fenced.Load() {
		return
	}
	if w.next >= 0 && w.next-w.watermark.Load() > w.g.n.cfg.MaxWindow/2 && w.watermark.Load() >= 0 {
		return
	}
	if !w.pausedFlag.Swap(false) {
		return
	}
	w.g.client().ResumeFetchPartitions(map[string][]int32{w.tp.topic: {w.tp.partition}})
}

// flush writes the partition's state to the tracker when it changed.
func (w *worker) flush() {
	if !w.claimed || !w.dirty || w.fenced.Load() {
		return
	}
	w.updateWatermark()
	f := tracking.Flush{
		Epoch:     w.epoch,
		Acked:     &w.acked,
		Watermark: w.watermark.Load(),
		Fetched:   w.next,
		Committed: w.committedAt.Load(),
		Pending:   int64(len(w.pending)),
		InFlight:  int64(w.inflight),
		Keys:      int64(len(w.lanes)),
	}
	if rec := w.pending[f.Watermark]; rec != nil && !rec.dispatched.IsZero() {
		f.Oldest = rec.dispatched
	}
	err := w.writeState(f)
	if errors.Is(err, tracking.ErrStateLost) {
		// Redis lost the state (restart without persistence): claim again
		// and write what this node knows; its acks are true, so nothing is
		// lost, and the new epoch still fences any older owner.
		w.log.Warn("tracking state lost; claiming again")
		if err = w.claim(); err == nil {
			f.Epoch = w.epoch
			err = w.writeState(f)
		}
	}
	if errors.Is(err, tracking.ErrFenced) {
		// Another claim is stored. It is a newer owner's, or a zombie's
		// that re-claimed after Redis lost the state; claiming again with
		// this node's current generation tells them apart: the store refuses
		// it only in favour of a newer generation.
		if err = w.claim(); err == nil {
			f.Epoch = w.epoch
			err = w.writeState(f)
		}
	}
	switch {
	case err == nil:
		w.dirty = false
		w.flushedWM.Store(f.Watermark)
	case errors.Is(err, tracking.ErrFenced):
		w.becomeFenced(err)
	default:
		w.log.Warn("flush failed; will retry", "err", err)
	}
}

func (w *worker) writeState(f tracking.Flush) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	started := time.Now()
	err := w.g.n.tracker.Flush(ctx, w.pk, f)
	w.g.tel.flushTime.Record(ctx, time.Since(started).Seconds(), metric.WithAttributeSet(w.g.attrs))
	if err != nil {
		w.g.countError("flush")
	}
	return err
}

// becomeFenced stops all work on a partition another owner has claimed:
// deliveries are aborted, fetching pauses, and the committer skips it. The
// group's rebalance will take the partition away.
func (w *worker) becomeFenced(err error) {
	if w.fenced.Swap(true) {
		return
	}
	w.log.Warn("partition fenced by a newer owner; stopping work on it", "err", err)
	w.draining = true
	w.cancelDeliver()
	w.pause()
}

// commitCandidate returns the offset to commit, if it is ahead of the last
// commit. It is the watermark of the last successful flush, never the live
// one: the Kafka commit is never ahead of the tracking state, so a node
// fenced in Redis cannot commit what it acked after losing its claim.
func (w *worker) commitCandidate() (int64, bool) {
	if w.fenced.Load() {
		return 0, false
	}
	wm := w.flushedWM.Load()
	return wm, wm >= 0 && wm > w.committedAt.Load()
}

// committed records a successful Kafka commit; the loop trims below it.
func (w *worker) committed(o int64) {
	for {
		cur := w.committedAt.Load()
		if o <= cur || w.committedAt.CompareAndSwap(cur, o) {
			break
		}
	}
	w.signal()
}

// drain stops dispatching and waits for in-flight deliveries until
// deadline; what is still in flight then is aborted (it stays pending, the
// next owner delivers it).
func (w *worker) drain(deadline time.Time) {
	var drained chan struct{}
	if !w.do(func() {
		w.draining = true
		w.pause()
		if w.inflight > 0 {
			w.drained = make(chan struct{})
			drained = w.drained
		}
	}) {
		return
	}
	if drained == nil {
		return
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-drained:
	case <-t.C:
		w.log.Warn("drain deadline passed; aborting in-flight deliveries")
		w.cancelDeliver()
		<-drained
	}
}

// abort cancels in-flight deliveries at once (the partition is lost).
func (w *worker) abort() {
	w.cancelDeliver()
}

// flushNow writes the state at once (before a final commit).
func (w *worker) flushNow() {
	w.do(func() {
		w.processResults()
		w.dirty = true
		w.flush()
	})
}

// stop ends the worker after a final flush; with release the claim is
// handed back (graceful handover) so status shows no owner until the next
// one claims.
func (w *worker) stop(release bool) {
	w.do(func() {
		w.draining = true
		w.processResults()
		w.dirty = true
		w.flush()
		if release && w.claimed && !w.fenced.Load() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := w.g.n.tracker.Release(ctx, w.pk, w.epoch); err != nil && !errors.Is(err, tracking.ErrFenced) {
				w.log.Warn("release failed", "err", err)
			}
			cancel()
		}
	})
	w.cancel()
	<-w.done
}

func (w *worker) stats() PartitionStats {
	return PartitionStats{
		Topic:     w.tp.topic,
		Partition: w.tp.partition,
		Watermark: w.watermark.Load(),
		Committed: w.committedAt.Load(),
		Paused:    w.pausedFlag.Load(),
	}
}
