package dispatcher

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/deadletter"
)

// RedriveQueue holds redriven dead letters until the owner of their
// source partition has sent them; deadletter.Queue implements it.
// QueuedVersion returns the count of pushes, which moves after every
// redrive queued on any node; QueuedMany lists the partitions with
// redrives queued of each of many subscriptions, in one round trip (the
// node polls once for all, and lists again only when the count moved);
// Next
// returns up to n of one partition's, oldest first, leaving them queued;
// Done takes one out.
type RedriveQueue interface {
	QueuedVersion(ctx context.Context) (string, error)
	QueuedMany(ctx context.Context, subscriptions []string) (map[string][]deadletter.Source, error)
	Next(ctx context.Context, subscription, topic string, partition int32, n int) ([]deadletter.Redrive, error)
	Done(ctx context.Context, r deadletter.Redrive) error
}

// redriveWindow bounds the redrives of one partition taken at a time.
const redriveWindow = 64

// redriver takes the redrives of a group's owned partitions from the
// queue into their workers: each is injected on its key's lane, so that
// it goes after the key's records in flight and before its next ones,
// and a key's redrives go one at a time in queue order. A redrive leaves
// the queue once it was tried, whatever the endpoint answered; one whose
// partition was let go stays for the next owner.
type redriver struct {
	g *group
	q RedriveQueue

	mu sync.Mutex
	// taken are the redrives of each worker injected and not yet seen
	// gone from the queue, by id: true once tried.
	taken map[*worker]map[string]bool
	// entries maps each injected record to its redrive and worker.
	entries map[*kgo.Record]injected
}

// injected is a redrive injected into a worker.
type injected struct {
	w  *worker
	rd deadletter.Redrive
}

func newRedriver(g *group, q RedriveQueue) *redriver {
	return &redriver{g: g, q: q, taken: make(map[*worker]map[string]bool), entries: make(map[*kgo.Record]injected)}
}

// poll reads the queues of the owned partitions that sources, the node's
// list of the subscription's queues (loops.redriveLoop), says are not
// empty.
func (r *redriver) poll(ctx context.Context, sources []deadletter.Source) {
	ws := r.g.snapshotWorkers()
	owned := make(map[*worker]bool, len(ws))
	for _, w := range ws {
		owned[w] = true
	}
	r.mu.Lock()
	for w := range r.taken {
		if !owned[w] {
			delete(r.taken, w) // let go: its redrives are the next owner's
		}
	}
	for e, in := range r.entries {
		if !owned[in.w] {
			delete(r.entries, e)
		}
	}
	r.mu.Unlock()
	queued := queuedSet(sources)
	for _, w := range ws {
		if !w.pub.claimed.Load() || w.pub.fenced.Load() {
			continue
		}
		if !queued[w.tp] {
			r.take(ctx, w, nil) // forgets what was tried
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		rs, err := r.q.Next(rctx, r.g.sub.ID, w.tp.topic, w.tp.partition, redriveWindow)
		cancel()
		if err != nil {
			w.log.Warn("cannot read redrives; will retry", "err", err)
			continue
		}
		r.take(ctx, w, rs)
	}
}

// idle reports whether the redriver holds nothing taken: a poll with
// nothing queued would do nothing, and the node's loop skips it.
func (r *redriver) idle() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.entries) > 0 {
		return false
	}
	for _, taken := range r.taken {
		if len(taken) > 0 {
			return false
		}
	}
	return true
}

// take injects into w the redrives of rs it has not taken yet, retries
// taking out of the queue those tried, and forgets those gone from it.
func (r *redriver) take(ctx context.Context, w *worker, rs []deadletter.Redrive) {
	r.mu.Lock()
	taken := r.taken[w]
	if taken == nil {
		taken = make(map[string]bool)
		r.taken[w] = taken
	}
	queued := make(map[string]bool, len(rs))
	var fresh []deadletter.Redrive
	var retry []deadletter.Redrive
	for _, rd := range rs {
		queued[rd.ID] = true
		tried, ok := taken[rd.ID]
		switch {
		case !ok:
			taken[rd.ID] = false
			fresh = append(fresh, rd)
		case tried:
			// Tried, but still queued: taking it out failed, or this read
			// raced it.
			retry = append(retry, rd)
		}
	}
	for id, tried := range taken {
		if tried && !queued[id] {
			delete(taken, id)
		}
	}
	r.mu.Unlock()
	for _, rd := range retry {
		r.done(ctx, w, rd)
	}
	if len(fresh) == 0 {
		return
	}
	w.do(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, rd := range fresh {
			if !w.m.Owns(rd.Key, rd.Offset) {
				// Its key is another sharer's: that node sends it.
				delete(taken, rd.ID)
				continue
			}
			rec := rd.Record()
			w.m.Inject(rd.Key, rec)
			r.entries[rec] = injected{w: w, rd: rd}
		}
	})
}

// forget drops injected records a worker let go with their key range:
// they stay queued for the range's next owner.
func (r *redriver) forget(es []*record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range es {
		in, ok := r.entries[e.Payload]
		if !ok {
			continue
		}
		delete(r.entries, e.Payload)
		if taken := r.taken[in.w]; taken != nil {
			delete(taken, in.rd.ID)
		}
	}
}

// deliver sends one injected record with the redrive's attempts and takes
// it out of the queue once tried; aborted (the partition let go), it
// stays queued.
func (r *redriver) deliver(j job) {
	r.mu.Lock()
	rd := r.entries[j.rec].rd
	delete(r.entries, j.rec)
	r.mu.Unlock()
	ctx := j.w.deliverCtx
	err := r.g.n.redeliver.Redeliver(ctx, r.g.ep, j.rec, rd.DeliveryID)
	if ctx.Err() == nil {
		if err != nil {
			// Refused again: it stays listed in the dead-letter topic,
			// and is not dead-lettered twice.
			j.w.log.Warn("redriven dead letter not accepted", "offset", rd.Offset, "delivery_id", rd.DeliveryID, "err", err)
		}
		r.done(context.Background(), j.w, rd)
	}
	j.w.pushResult(result{rec: j.rec, acked: err == nil})
}

// done takes a tried redrive out of the queue; a failure is retried by
// the next poll.
func (r *redriver) done(ctx context.Context, w *worker, rd deadletter.Redrive) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := r.q.Done(ctx, rd); err != nil {
		w.log.Warn("cannot take a tried redrive out of its queue; will retry", "delivery_id", rd.DeliveryID, "err", err)
	}
	r.mu.Lock()
	if taken := r.taken[w]; taken != nil {
		taken[rd.ID] = true
	}
	r.mu.Unlock()
}
