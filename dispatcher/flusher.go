package dispatcher

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/keyhook/keyhook/partition"
	"github.com/keyhook/keyhook/tracking"
)

// flushTimeout bounds one call of a round of tracking writes (a chunk of
// roundChunk partitions of a tick's flush or renewal, chunks.go), or the
// final flush and release of the partitions a group hands over.
const flushTimeout = 2 * time.Second

// flusher writes the tracking state of all the node's partitions in one
// pipelined round per tick. Workers hand it their snapshot without
// waiting (submit) and get the outcome back as an event their loop
// processes, like a delivery result: a slow or hung Redis delays the
// flushes, and so the commits that follow them, never the deliveries.
type flusher struct {
	tracker  Tracker
	interval time.Duration
	log      *slog.Logger

	// mu guards pending and spare.
	mu      sync.Mutex
	pending []flushReq
	// spare is the last round's slice, emptied, for the next round's
	// pending: grown anew from nothing each round, the slices of a node
	// of 1,000 subscriptions were an eighth of what it allocated.
	spare []flushReq

	// failing is set while rounds fail: a round that cannot reach Redis
	// fails for every partition of the node, and is said once, not once
	// per partition (4,000 lines a round at 1,000 subscriptions, which
	// the deliveries then waited behind on the log's lock). Only run's
	// goroutine uses it.
	failing bool
}

// flushReq is one partition's state waiting for a round.
type flushReq struct {
	w *worker
	// f is what the tracker stores, encoded from snap on the worker's loop.
	f tracking.Flush
	// snap goes back to the worker's machine when the write succeeded.
	snap partition.Snapshot
	// notes is the worker's count of attempt notes the write includes.
	notes uint64
	// sent is when the snapshot was taken, on the worker's clock
	// (worker.since): an accepted write confirms the claim as of then.
	sent time.Duration
}

// errRetired answers a snapshot the flusher dropped, unwritten, because
// its partition is being handed over.
var errRetired = errors.New("dispatcher: partition handed over; snapshot not written")

// flushResult is what a round hands back to a worker.
type flushResult struct {
	snap partition.Snapshot
	err  error
	// merged is the partition's watermark over every sharer (-1 unknown)
	// and committed the commit mirror the tracker holds (-1 none).
	merged, committed int64
	notes             uint64
	sent              time.Duration
}

func newFlusher(tracker Tracker, interval time.Duration, log *slog.Logger) *flusher {
	return &flusher{tracker: tracker, interval: interval, log: log}
}

// submit queues r for the next round. It never blocks: a worker submits
// again only once the result of its previous submission came back.
func (fl *flusher) submit(r flushReq) {
	fl.mu.Lock()
	fl.pending = append(fl.pending, r)
	fl.mu.Unlock()
}

// run writes what is pending every interval until ctx ends. Rounds never
// overlap: while one waits on Redis, ticks are dropped and snapshots
// gather for the next.
func (fl *flusher) run(ctx context.Context) {
	t := time.NewTicker(fl.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fl.round(ctx)
		}
	}
}

// round writes every pending state, in chunks each under its own
// deadline, and hands each worker its result as soon as its chunk is
// written.
func (fl *flusher) round(ctx context.Context) {
	fl.mu.Lock()
	reqs := fl.pending
	fl.pending, fl.spare = fl.spare[:0], nil
	fl.mu.Unlock()
	defer func() {
		// The workers and snapshots are the workers' again.
		clear(reqs)
		fl.mu.Lock()
		fl.spare = reqs[:0]
		fl.mu.Unlock()
	}()
	// A partition being handed over writes its final state itself; an
	// older snapshot must not follow it.
	live := reqs[:0]
	for _, r := range reqs {
		if r.w.retired.Load() {
			r.w.pushFlushed(flushResult{snap: r.snap, err: errRetired})
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	outcomes := make([]chunkOutcome, chunksOf(len(live)))
	inChunks(len(live), func(c, lo, hi int) { outcomes[c] = fl.writeChunk(ctx, live[lo:hi]) })
	failed := 0
	var first error
	for _, o := range outcomes {
		failed += o.failed
		if first == nil {
			first = o.first
		}
	}
	switch {
	case failed > 0 && !fl.failing:
		fl.failing = true
		fl.log.Warn("flush failed; will retry: commits wait for the writes, and a partition whose lease runs out stops delivering",
			"failed", failed, "of", len(live), "err", first)
	case failed == 0 && fl.failing:
		fl.failing = false
		fl.log.Info("flushes written again", "written", len(live))
	}
}

// chunkOutcome is what a chunk of a round tells the round for its log:
// how many of its writes failed (a refusal is its partition's news, not
// a failure), and the first error.
type chunkOutcome struct {
	failed int
	first  error
}

// writeChunk writes reqs under one deadline and hands each worker its
// result.
func (fl *flusher) writeChunk(ctx context.Context, reqs []flushReq) chunkOutcome {
	ctx, cancel := context.WithTimeout(ctx, flushTimeout)
	defer cancel()
	res := fl.write(ctx, reqs)
	var o chunkOutcome
	for i, r := range reqs {
		if err := res[i].Err; err != nil && !errors.Is(err, tracking.ErrFenced) && !errors.Is(err, tracking.ErrStateLost) {
			o.failed++
			if o.first == nil {
				o.first = err
			}
		}
		r.w.pushFlushed(r.result(res[i]))
	}
	return o
}

// result is the flushResult of r's write.
func (r flushReq) result(res tracking.FlushResult) flushResult {
	return flushResult{snap: r.snap, err: res.Err, merged: res.Watermark, committed: res.Committed, notes: r.notes, sent: r.sent}
}

// write writes the states of reqs in one pipelined call under ctx and
// records the call's time (the node's, without a subscription label: one
// call writes the partitions of up to 256 subscriptions, and recording it
// once per subscription made as many identical series and a histogram
// measure for most deliveries) and, per subscription, the failed writes.
// It returns one result per request, in order.
func (fl *flusher) write(ctx context.Context, reqs []flushReq) []tracking.FlushResult {
	if len(reqs) == 0 {
		return nil
	}
	pfs := make([]tracking.PartitionFlush, len(reqs))
	for i, r := range reqs {
		pfs[i] = tracking.PartitionFlush{Key: r.w.pk, Flush: r.f}
	}
	started := time.Now()
	res := fl.tracker.FlushRanges(ctx, pfs)
	reqs[0].w.g.tel.flushTime.Record(context.Background(), time.Since(started).Seconds())
	for i, r := range reqs {
		if res[i].Err != nil {
			r.w.g.countError("flush")
		}
	}
	return res
}
