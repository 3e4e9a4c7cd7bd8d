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

	"github.com/keyhook/keyhook/internal/backoff"
	"github.com/keyhook/keyhook/partition"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
)

// record is a fetched record as its partition tracks it until it is acked.
type record = partition.Entry[*kgo.Record]

// job is one record handed to the delivery pool, with the worker its
// result goes back to.
type job struct {
	w   *worker
	rec *record
}

// batchJob is a batch of one worker's records handed to the delivery pool.
type batchJob struct {
	w    *worker
	recs []*record
}

// result is what the delivery pool hands back to a worker.
type result struct {
	rec *record
	// acked: delivered or dead-lettered. False means the attempt was
	// aborted (shutdown, lost partition): the record stays pending.
	acked bool
}

// worker owns one assigned partition: a goroutine around the partition's
// state machine that feeds it fetched records and delivery results, hands
// what it makes ready to the delivery pool, pauses and resumes the fetch
// as it decides, and writes its snapshots to the tracker. Other goroutines
// talk to it through push, pushResult and do, and read what it publishes.
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

	mu      sync.Mutex
	inbox   [][]*kgo.Record
	results []result
	wake    chan struct{}
	ctrl    chan func()

	// committed is the last Kafka commit known: the group's offset at
	// assignment, then every commit the committer makes. The loop hands
	// it to the machine.
	committed atomic.Int64
	// highWatermark is the log end as of the last fetch, set by the poll.
	highWatermark atomic.Int64
	// pub is what the loop publishes for the committer, stats and gauges.
	pub published

	ctx           context.Context
	cancel        context.CancelFunc
	deliverCtx    context.Context
	cancelDeliver context.CancelFunc
	done          chan struct{}

	// Loop-owned state.
	m       *partition.Machine[*kgo.Record]
	epoch   int64
	paused  bool      // the fetch is paused in the client
	offer   []*record // the batch offered to the pool
	drained chan struct{}
}

// published mirrors the machine's positions for other goroutines.
type published struct {
	watermark atomic.Int64 // -1 unknown
	next      atomic.Int64 // fetch position, -1 before the first record
	pending   atomic.Int64
	// commitable is the offset the committer may commit, -1 none.
	commitable atomic.Int64
	paused     atomic.Bool
	fenced     atomic.Bool
	claimed    atomic.Bool
}

// partitionConfig is the state machine configuration of s's partitions.
func partitionConfig(s *subscription.Subscription, maxWindow int64) partition.Config {
	cfg := partition.Config{MaxWindow: maxWindow}
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

func newWorker(g *group, tp topicPartition, gen int32) *worker {
	m, err := partition.New[*kgo.Record](g.partition)
	if err != nil {
		panic("dispatcher: partition config validated by newGroup: " + err.Error())
	}
	w := &worker{
		g: g, tp: tp, pk: g.partitionKey(tp), gen: gen,
		log:   g.log.With("topic", tp.topic, "partition", tp.partition),
		attrs: partitionAttrs(g.sub.ID, tp),
		wake:  make(chan struct{}, 1),
		ctrl:  make(chan func()),
		done:  make(chan struct{}),
		m:     m,
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
	w.deliverCtx, w.cancelDeliver = context.WithCancel(w.ctx)
	go w.run()
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
	// What the partition held goes back to the node's budget.
	defer w.m.Close()
	flushT := time.NewTicker(w.g.n.cfg.FlushInterval)
	defer flushT.Stop()
	claimRetry := time.NewTimer(0)
	defer claimRetry.Stop()
	claimWait := backoff.MustNew(backoff.Config{Initial: 100 * time.Millisecond, Max: 5 * time.Second})
	// Until the claim succeeds the partition is paused: without the acked
	// set this node would redeliver what the previous owner finished.
	w.applyPause()
	batching := w.g.sub.Batch.Enabled()
	batchTimer := time.NewTimer(time.Hour)
	batchTimer.Stop()
	defer batchTimer.Stop()
	for {
		var send chan<- job
		var head job
		var sendBatch chan<- batchJob
		if batching {
			if w.offer == nil {
				var wait time.Duration
				w.offer, wait = w.m.Assemble()
				if wait > 0 {
					batchTimer.Reset(wait)
				}
			}
			if w.offer != nil && !w.m.Stopped() {
				sendBatch = w.g.batches
			}
		} else if e := w.m.Peek(); e != nil {
			send, head = w.g.jobs, job{w: w, rec: e}
		}
		select {
		case <-w.ctx.Done():
			return
		case <-claimRetry.C:
			if w.m.Claimed() || w.m.Fenced() {
				continue
			}
			if err := w.claim(); err != nil {
				// A refusal means a fresh claim of a newer generation is
				// stored: its owner releases it, it goes stale, or Kafka
				// gives this node a newer generation (claim reads it).
				// Until then the partition is assigned but not claimed,
				// which status and metrics show.
				wait := claimWait.Next()
				w.log.Warn("claim failed; retrying", "err", err, "in", wait)
				claimRetry.Reset(wait)
				continue
			}
			w.processInbox()
		case <-w.wake:
			w.m.SetCommitted(w.committed.Load())
			w.processResults()
			w.processInbox()
		case send <- head:
			_ = w.m.Dispatch(head.rec) // head is what Peek returned
		case sendBatch <- batchJob{w: w, recs: w.offer}:
			w.m.DispatchBatch(w.offer)
			w.offer = nil
		case <-batchTimer.C:
			// The oldest ready record waited long enough: the loop offers
			// the batch as it is.
		case f := <-w.ctrl:
			f()
		case <-flushT.C:
			// Records that waited for room in the node's budget try again.
			w.m.Refill()
			w.flush()
		}
		w.publish()
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
	c, err := w.g.n.tracker.ClaimTopic(ctx, w.pk, w.g.n.cfg.NodeID, w.gen, w.topicID)
	if err != nil {
		w.g.countError("claim")
		return err
	}
	if c.DiscardedTopicID != "" {
		w.log.Warn("tracking state of a deleted topic of the same name dropped", "topic_id", w.topicID, "old_topic_id", c.DiscardedTopicID)
		w.g.countStartReset(w.tp, resetStaleTracking)
	}
	w.epoch = c.Epoch
	w.m.Claim(c.Acked)
	w.log.Info("partition claimed", "epoch", c.Epoch, "previous_owner", c.PrevOwner, "acked_ranges", c.Acked.Len())
	return nil
}

// processInbox offers fetched records to the machine, which accepts them
// while the window has room and holds the rest until acks make room; the
// fetch pauses meanwhile. The window is thus a hard bound on what is
// dispatched and tracked, whatever size the fetches have.
func (w *worker) processInbox() {
	w.mu.Lock()
	batches := w.inbox
	w.inbox = nil
	w.mu.Unlock()
	for _, rs := range batches {
		recs := make([]partition.Record[*kgo.Record], len(rs))
		for i, r := range rs {
			recs[i] = partition.Record[*kgo.Record]{
				Offset: r.Offset, Key: r.Key, Control: r.Attrs.IsControl(), Size: len(r.Value),
				Bytes: recordBytes(r), Payload: r,
			}
		}
		w.m.Offer(recs)
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
	w.mu.Lock()
	rs := w.results
	w.results = nil
	w.mu.Unlock()
	for _, res := range rs {
		w.m.Done(res.rec, res.acked)
	}
	if w.drained != nil && w.m.InFlight() == 0 {
		close(w.drained)
		w.drained = nil
	}
}

// publish mirrors the machine for other goroutines and carries out its
// fetch decision.
func (w *worker) publish() {
	w.pub.watermark.Store(w.m.Watermark())
	w.pub.next.Store(w.m.Next())
	w.pub.pending.Store(int64(w.m.Pending()))
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
	ps := map[string][]int32{w.tp.topic: {w.tp.partition}}
	if want {
		w.g.client().PauseFetchPartitions(ps)
	} else {
		w.g.client().ResumeFetchPartitions(ps)
	}
}

// flush writes the partition's state to the tracker when it changed.
func (w *worker) flush() {
	w.m.SetCommitted(w.committed.Load())
	if !w.m.Dirty() {
		return
	}
	s := w.m.Snapshot()
	f := tracking.Flush{
		Epoch:     w.epoch,
		Acked:     s.Acked,
		Watermark: s.Watermark,
		Fetched:   s.Next,
		Committed: s.Committed,
		Pending:   int64(s.Pending),
		InFlight:  int64(s.InFlight),
		Keys:      int64(s.Keys),
		Oldest:    s.Oldest,
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
		w.m.Flushed(s)
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
	if w.m.Fenced() {
		return
	}
	w.log.Warn("partition fenced by a newer owner; stopping work on it", "err", err)
	w.m.Fence()
	w.pub.fenced.Store(true)
	w.cancelDeliver()
	w.publish()
}

// commitCandidate returns the offset to commit, if it is ahead of the last
// commit: the machine's candidate as the loop last published it.
func (w *worker) commitCandidate() (int64, bool) {
	if w.pub.fenced.Load() {
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

// drain stops dispatching and waits for in-flight deliveries until
// deadline; what is still in flight then is aborted (it stays pending, the
// next owner delivers it).
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
		w.m.Touch()
		w.flush()
		w.publish()
	})
}

// stop ends the worker after a final flush; with release the claim is
// handed back (graceful handover) so status shows no owner until the next
// one claims.
func (w *worker) stop(release bool) {
	w.do(func() {
		w.m.Stop()
		w.processResults()
		w.m.Touch()
		w.flush()
		if release && w.m.Claimed() && !w.m.Fenced() {
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
		Watermark: w.pub.watermark.Load(),
		Committed: w.committed.Load(),
		Paused:    w.pub.paused.Load(),
		Pending:   w.pub.pending.Load(),
		Claimed:   w.pub.claimed.Load() && !w.pub.fenced.Load(),
	}
}
