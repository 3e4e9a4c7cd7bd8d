package dispatcher

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/metric"
)

// A cursor's worker takes its partition's records from the reader's
// shared stream while it keeps up: attached. When it cannot take them (a
// shared batch arrives while its machine still holds the previous one in
// its backlog, or it starts behind the reader) it detaches: it drops what
// the reader hands it and, once its machine has room, reads on from where
// it stopped with a client of its own, a catch-up pass (like a re-read
// pass, reread.go). It rejoins once it has offered everything below the
// reader's position: the reader hands out its batches in order and
// updates its position under the same lock (reader.run), so every batch
// after that position is in the worker's mailbox after it, and what came
// before is below what the worker has offered.

// cursorSource is where a cursor's worker takes its records from. Only the
// loop uses it, but for batches, which a pass sends on.
type cursorSource struct {
	// offered is the next offset to offer the machine: everything below
	// was offered (or is below the start), -1 before the start is known.
	offered int64
	// detached is set while the worker does not take the shared stream.
	detached bool
	// pass is the catch-up in progress, nil none; seq numbers the passes.
	pass *catchupPass
	seq  uint64
	// batches brings what the pass read; its one slot holds the pass back
	// while the machine has no room.
	batches chan catchupBatch
	// noticed is when the worker last told of falling behind
	// (Config.CursorDetached).
	noticed time.Time
	// claimHeld is what the records kept while the claim is on its way
	// hold of the node's budget (claimEntryBytes each), given back once
	// claimed or stopped.
	claimHeld int64
}

// detachNoticeEvery bounds how often a partition's cursor falling behind
// is told of: a slow endpoint detaches it again at every rejoin.
const detachNoticeEvery = 10 * time.Minute

// whyWindowFull is why a cursor that cannot keep up detaches.
const whyWindowFull = "window full: the subscription delivers slower than the shared read"

// whyClaimPending is why a cursor detaches whose claim of the partition
// is still not in after claimBacklog records.
const whyClaimPending = "claim pending: the partition's tracking state is not claimed yet"

// claimBacklog bounds the records a cursor's partition keeps offered
// while its claim is on its way (the machine accepts nothing before it;
// they wait in its backlog). A node restarting claims thousands of
// cursor partitions over a few seconds, and a cursor detached for the
// second batch the reader offered meanwhile: most of a restarted node's
// cursors then caught up, 32 passes at a time, and every subscription
// delivered on every partition again 23 to 74 s after a kill -9. The
// records are the reader's, shared by every cursor; the backlog holds
// references, and each entry is reserved of the node's budget
// (claimEntryBytes): unreserved, the entries alone of 4,000 cursor
// partitions could reach 180 MB outside --max-buffered-bytes.
const claimBacklog = 512

// claimEntryBytes is what a record kept for a claim costs its cursor: its
// entry in the machine's backlog (partition.Record, 88 bytes) and the
// backlog's growth. The record itself is the reader's, shared.
const claimEntryBytes = 128

type catchupPass struct {
	id     uint64
	cancel context.CancelFunc
}

// maxCatchups bounds the catch-up passes running on a node at once: each
// is a Kafka client with its connections and fetch buffers, and a burst
// that detaches many cursors at once (a node's memory budget full, many
// subscriptions created from the earliest offset) must not open
// thousands. A detached cursor without a slot stays detached and asks
// again on its next turn.
const maxCatchups = 32

// catchupBatch is what a pass read.
type catchupBatch struct {
	pass     uint64
	recs     []*kgo.Record
	logStart int64
	hwm      int64
}

// cursor reports whether the worker is a cursor's, fed by a reader.
func (w *worker) cursor() bool { return w.g.rd != nil }

// takeShared offers what the reader fetched to the machine, unless the
// worker is detached or its machine still holds what it was offered last.
func (w *worker) takeShared(rs []*kgo.Record) {
	if w.src.detached {
		return
	}
	rs = from(rs, w.src.offered)
	if len(rs) == 0 {
		return
	}
	if w.m.Paused() && w.m.Backlog() > 0 {
		why := whyWindowFull
		if !w.m.Claimed() && !w.m.Stopped() {
			if w.m.Backlog()+len(rs) <= claimBacklog && w.holdForClaim(len(rs)) {
				w.offerRecords(rs)
				return
			}
			why = whyClaimPending
		}
		w.detach(why)
		if n := w.g.n.cfg.CursorDetached; n != nil && time.Since(w.src.noticed) >= detachNoticeEvery {
			w.src.noticed = time.Now()
			n(w.g.sub.ID, w.tp.topic, w.tp.partition, max(rs[len(rs)-1].Offset+1-w.src.offered, 0), why)
		}
		return
	}
	w.offerRecords(rs)
}

// holdForClaim reserves of the node's budget what n records kept for the
// claim cost, false when the budget has no room: the cursor then detaches
// rather than grow the node past it.
func (w *worker) holdForClaim(n int) bool {
	cost := int64(n) * claimEntryBytes
	if !w.g.n.budget.Reserve(cost) {
		return false
	}
	w.src.claimHeld += cost
	return true
}

// releaseClaimHeld gives back what holdForClaim reserved: once claimed,
// the machine accepts the records, reserving their own bytes, or keeps
// them in its backlog as it keeps any batch a full window left there.
func (w *worker) releaseClaimHeld() {
	if w.src.claimHeld > 0 {
		w.g.n.budget.Release(w.src.claimHeld)
		w.src.claimHeld = 0
	}
}

// offerRecords hands rs, records at or above offered in offset order, to the
// machine.
func (w *worker) offerRecords(rs []*kgo.Record) {
	w.m.Offer(w.machineRecords(rs))
	w.src.offered = rs[len(rs)-1].Offset + 1
}

// from returns the records of rs at or above offset o.
func from(rs []*kgo.Record, o int64) []*kgo.Record {
	for i, r := range rs {
		if r.Offset >= o {
			return rs[i:]
		}
	}
	return nil
}

func (w *worker) detach(why string) {
	if w.src.detached {
		return
	}
	w.src.detached = true
	w.pub.detached.Store(true)
	w.g.tel.detached.Add(context.Background(), 1, metric.WithAttributeSet(w.attrs))
	w.log.Debug("cursor left the shared read", "why", why, "at", w.src.offered)
}

// manageCatchup rejoins the shared stream once the worker offered
// everything below the reader's position, and otherwise starts a pass
// from where it stopped once its machine has room.
func (w *worker) manageCatchup() {
	if !w.src.detached {
		return
	}
	if pos := w.g.rd.position(w.tp); pos >= 0 && w.src.offered >= pos {
		if w.src.pass != nil {
			w.src.pass.cancel()
			w.src.pass = nil
		}
		w.src.detached = false
		w.pub.detached.Store(false)
		w.log.Debug("cursor rejoined the shared read", "at", w.src.offered)
		return
	}
	if w.src.pass == nil && !w.m.Paused() && w.src.offered >= 0 && !w.m.Stopped() {
		select {
		case w.g.n.catchups <- struct{}{}:
		default:
			return // every slot taken: the next turn asks again
		}
		w.src.seq++
		ctx, cancel := context.WithCancel(w.ctx)
		w.src.pass = &catchupPass{id: w.src.seq, cancel: cancel}
		id, at := w.src.seq, w.src.offered
		w.bg.Go(func() {
			defer func() { <-w.g.n.catchups }()
			w.catchupLoop(ctx, id, at)
		})
	}
}

// catchupBatches is the channel the loop takes a pass's batches from:
// nil (never ready) while the machine has no room for them.
func (w *worker) catchupBatches() <-chan catchupBatch {
	if w.src.pass == nil || w.m.Paused() {
		return nil
	}
	return w.src.batches
}

// takeCatchup offers what the current pass read.
func (w *worker) takeCatchup(b catchupBatch) {
	if w.src.pass == nil || b.pass != w.src.pass.id {
		return // an ended pass's
	}
	if b.logStart > w.logStart.Load() {
		w.logStart.Store(b.logStart)
	}
	if b.hwm > w.highWatermark.Load() {
		w.highWatermark.Store(b.hwm)
	}
	if rs := from(b.recs, w.src.offered); len(rs) > 0 {
		w.g.tel.caughtUp.Add(context.Background(), int64(len(rs)), metric.WithAttributeSet(w.attrs))
		w.offerRecords(rs)
	}
}

// catchupLoop is a pass: it reads the partition from offset at and hands
// the records to the worker until ctx ends.
func (w *worker) catchupLoop(ctx context.Context, id uint64, at int64) {
	cl, err := w.partitionClient("-catchup", at, 4<<20, 1<<20,
		// Control records let the watermark walk over transaction
		// markers, as the reader's do.
		kgo.KeepControlRecords())
	if err != nil {
		w.g.countError("catchup")
		w.log.Warn("catch-up of the cursor failed", "err", err)
		return
	}
	defer cl.Close()
	for {
		fs := cl.PollRecords(ctx, 2000)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return
		}
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.Canceled) {
				w.g.countError("catchup")
				w.log.Warn("catch-up fetch error", "err", err)
			}
		})
		b := catchupBatch{pass: id}
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if p.Topic == w.tp.topic && p.Partition == w.tp.partition {
				b.recs = append(b.recs, p.Records...)
				b.logStart, b.hwm = p.LogStartOffset, p.HighWatermark
			}
		})
		if len(b.recs) == 0 {
			continue
		}
		select {
		case w.src.batches <- b:
			w.signal()
		case <-ctx.Done():
			return
		}
	}
}

// partitionClient is a client without a group reading the worker's
// partition from offset at, in fetches of at most maxBytes (partBytes of
// the partition): a re-read or a catch-up pass.
func (w *worker) partitionClient(suffix string, at int64, maxBytes, partBytes int32, extra ...kgo.Opt) (*kgo.Client, error) {
	n := w.g.n
	opts := []kgo.Opt{
		kgo.SeedBrokers(n.cfg.Brokers...),
		kgo.ClientID("keyhook-" + n.cfg.NodeID + suffix),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{w.tp.topic: {w.tp.partition: kgo.NewOffset().At(at)}}),
		// What the group's fetch saw, no more: aborted data stays unread.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(250 * time.Millisecond),
		kgo.FetchMaxBytes(maxBytes),
		kgo.FetchMaxPartitionBytes(partBytes),
		// An offset retention deleted resets to the log start, which the
		// batches carry: the worker sees what is gone.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}
	opts = append(opts, extra...)
	opts = append(opts, n.cfg.KafkaOptions...)
	return kgo.NewClient(opts...)
}
