package dispatcher

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/metric"
)

// A key holding more records than it can deliver parks the rest by offset
// (partition.Config.ParkAfter): their values are dropped and, when the key
// has room again, read again from Kafka. A re-read is a pass: a client of
// its own, without a group, reading the partition from the lowest parked
// offset that a key has room for, handing what it reads to the worker,
// whose machine takes back only the parked records next in their key's
// turn. The worker starts a pass, lets it run while keys take what it
// reads, and ends it once none has room; a key that wants an offset the
// pass went past starts a new one. Each pass is a client of its own, so a
// record of an ended pass can never be taken for one of the next.

// rereadBatch is what a pass read, handed to its worker.
type rereadBatch struct {
	pass uint64
	recs []*kgo.Record
	// logStart is the partition's log start offset as of the fetch.
	logStart int64
}

// rereadPass is the re-read in progress of a worker.
type rereadPass struct {
	id     uint64
	from   int64
	cancel context.CancelFunc
}

// rereader is a worker's re-reading of parked records; only the loop
// uses it, but for batches, which the pass sends on.
type rereader struct {
	// pass is the pass in progress, nil none; pos the offset it reaches
	// next; seq numbers the passes.
	pass *rereadPass
	seq  uint64
	pos  int64
	// started is when the last pass started, logged when one was last
	// logged.
	started, logged time.Time
	// batches brings what the pass read; its one slot holds the pass back
	// while the loop is busy.
	batches chan rereadBatch
}

// rereadEvery paces the passes of a partition: a pass costs a client and
// a connection.
const rereadEvery = 50 * time.Millisecond

// manageReread starts, keeps or ends the partition's re-read as the
// machine's parked records ask.
//
// A pass starts for a key down to half its cap in memory, and goes on
// while any key with room below its refill cap wants an offset ahead of
// it; a key wanting one behind it starts a new pass, but only once down
// to half its cap, so a key refilled to its cap does not restart a pass
// for every record it delivers.
func (w *worker) manageReread() {
	want := w.m.Reread()
	p := w.rr.pass
	switch {
	case p != nil && want >= 0 && want < max(p.from, w.rr.pos):
		// Behind the pass: a new one, soon.
		if time.Since(w.rr.started) >= rereadEvery {
			w.endPass()
			w.startPass(want)
		}
	case p != nil:
		if want < 0 && w.m.RereadAfter(w.rr.pos) < 0 {
			w.endPass()
		}
	case want >= 0 && time.Since(w.rr.started) >= rereadEvery:
		w.startPass(want)
	}
}

func (w *worker) startPass(from int64) {
	w.rr.seq++
	ctx, cancel := context.WithCancel(w.ctx)
	p := &rereadPass{id: w.rr.seq, from: from, cancel: cancel}
	w.rr.pass, w.rr.pos, w.rr.started = p, from, time.Now()
	if time.Since(w.rr.logged) >= 10*time.Second {
		w.rr.logged = time.Now()
		w.log.Info("re-reading parked records", "from", from, "parked", w.m.Parked())
	}
	w.bg.Add(1)
	go func() {
		defer w.bg.Done()
		w.rereadLoop(ctx, p.id, from)
	}()
}

func (w *worker) endPass() {
	w.rr.pass.cancel()
	w.rr.pass = nil
}

// rereadLoop is a pass: it reads the partition from offset from and hands
// the records to the worker until ctx ends.
func (w *worker) rereadLoop(ctx context.Context, id uint64, from int64) {
	// Small fetches: a pass ends when its keys are full, and what it
	// read beyond is read again by the next.
	cl, err := w.partitionClient("-reread", from, 1<<20, 256<<10)
	if err != nil {
		w.g.countError("reread")
		w.log.Warn("re-read of parked records failed", "err", err)
		return
	}
	defer cl.Close()
	for {
		fs := cl.PollRecords(ctx, 1000)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return
		}
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.Canceled) {
				w.g.countError("reread")
				w.log.Warn("re-read fetch error", "err", err)
			}
		})
		var b rereadBatch
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if p.Topic == w.tp.topic && p.Partition == w.tp.partition {
				b.recs = append(b.recs, p.Records...)
				b.logStart = p.LogStartOffset
			}
		})
		if len(b.recs) == 0 {
			continue
		}
		b.pass = id
		select {
		case w.rr.batches <- b:
		case <-ctx.Done():
			return
		}
	}
}

// takeReread hands what the current pass read to the machine.
func (w *worker) takeReread(b rereadBatch) {
	if w.rr.pass == nil || b.pass != w.rr.pass.id {
		return // an ended pass's
	}
	recs := w.machineRecords(b.recs)
	if b.logStart > w.logStart.Load() {
		w.logStart.Store(b.logStart)
	}
	w.m.Unpark(recs)
	w.rr.pos = b.recs[len(b.recs)-1].Offset + 1
	w.g.tel.reread.Add(context.Background(), int64(len(b.recs)), metric.WithAttributeSet(w.attrs))
	w.pub.reread.Add(int64(len(b.recs)))
	w.manageReread()
}
