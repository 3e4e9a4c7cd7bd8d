package dispatcher

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/keyrange"
	"github.com/keyhook/keyhook/sharing"
)

// A reader shares partitions by key range as a subscription's own group
// does (group.go, reshape.go): its group's balancer is sharing's, so
// with more nodes than partitions each sharer of a partition fetches it
// whole, once, and offers it to every cursor, whose workers deliver only
// the ranges the reader was given. A range the balancer takes away in
// place is given up by every cursor's worker (frozen, drained, flushed,
// released in the tracker: worker.reshape) before the reader tells its
// balancer (Released) and asks for the rebalance that hands it over.
//
// A subscription that does not share (ordering partition, sharing off)
// is delivered whole by the sharer holding hash 0, the one that commits,
// and not at all by the others.

// readerShares is the reader's part in key-range sharing. reader.mu
// guards it.
type readerShares struct {
	balancer *sharing.Balancer
	// ranges are each partition's key ranges as of the latest sync; a
	// partition absent is whole.
	ranges map[topicPartition]keyrange.Set
	// owing holds, for each partition the balancer shrank in place and
	// has not been told of yet, the cursors' workers still giving up
	// ranges it took away.
	owing map[topicPartition]map[*worker]struct{}
	// kick wakes settle (reader.settler).
	kick chan struct{}
}

func newReaderShares() readerShares {
	return readerShares{
		ranges: make(map[topicPartition]keyrange.Set),
		owing:  make(map[topicPartition]map[*worker]struct{}),
		kick:   make(chan struct{}, 1),
	}
}

// readerBalancers are the reader group's balancers: sharing's, and
// cooperative-sticky for nodes that read shared without sharing (a
// rolling upgrade), whose partitions are whole.
func (r *reader) readerBalancers() ([]kgo.GroupBalancer, error) {
	b, err := sharing.New(sharing.Config{Sharing: true, OnSync: r.onSync})
	if err != nil {
		return nil, err
	}
	r.sh.balancer = b
	return []kgo.GroupBalancer{b, wholePartitions{GroupBalancer: kgo.CooperativeStickyBalancer(), onSync: r.onSync}}, nil
}

// cursorRanges returns the key ranges of tp that g's worker delivers,
// false when g has no worker for it: a subscription that shares delivers
// the reader's ranges; one that does not, the whole partition on the
// node holding its hash 0 and nothing elsewhere. r.mu is held.
func (s *readerShares) cursorRanges(g *group, tp topicPartition) (keyrange.Set, bool) {
	rs, ok := s.ranges[tp]
	if !ok || rs.IsFull() {
		return keyrange.Full(), true
	}
	if g.sub.Shares() {
		return rs, true
	}
	return keyrange.Full(), rs.Contains(0)
}

// commits reports whether the node commits tp for the reader group: it
// holds hash 0, as a cursor's worker does to commit (worker.commits).
// r.mu is held.
func (s *readerShares) commits(tp topicPartition) bool {
	rs, ok := s.ranges[tp]
	return !ok || rs.Contains(0)
}

// onSync records the key ranges a sync gave the reader (on franz-go's
// group goroutine: it never blocks) and hands every cursor's worker of a
// partition kept its new ranges; partitions newly assigned take theirs in
// onAssigned, which follows. A partition shrunk in place owes the
// balancer a release until every cursor's worker of it gave its lost
// ranges up. A worker of a subscription that does not share, on a node
// that lost hash 0 in place, is handed over whole.
func (r *reader) onSync(a sharing.Assignment) {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := r.sh.ranges
	r.sh.ranges = make(map[topicPartition]keyrange.Set)
	for topic, ps := range a {
		for p, rs := range ps {
			r.sh.ranges[topicPartition{topic, p}] = rs
		}
	}
	shrunk := false
	for tp, rs := range r.sh.ranges {
		if old, ok := prev[tp]; ok && !rs.Covers(old) && r.sh.owing[tp] == nil {
			r.sh.owing[tp] = make(map[*worker]struct{})
			shrunk = true
		}
	}
	for g := range r.cursors {
		for _, w := range g.snapshotWorkers() {
			if _, ok := r.sh.ranges[w.tp]; !ok {
				continue // franz-go revokes it
			}
			rs, ok := r.sh.cursorRanges(g, w.tp)
			owe := r.sh.owing[w.tp]
			if !ok {
				if g.takeWorker(w) {
					if owe == nil {
						owe = make(map[*worker]struct{})
						r.sh.owing[w.tp] = owe
						shrunk = true
					}
					owe[w] = struct{}{}
					g.handOver(w)
				}
				continue
			}
			w.setTarget(rs)
			if owe != nil && !rs.IsFull() {
				owe[w] = struct{}{}
			}
		}
	}
	if shrunk {
		r.kickSettle()
	}
}

// rangesReleased is told by a cursor's worker that it gave up the ranges
// it no longer holds, keeping keep.
func (r *reader) rangesReleased(w *worker, keep keyrange.Set) {
	r.mu.Lock()
	if owe := r.sh.owing[w.tp]; owe != nil {
		if rs, ok := r.sh.cursorRanges(w.g, w.tp); ok && rs.Covers(keep) {
			delete(owe, w)
		}
	}
	r.mu.Unlock()
	r.kickSettle()
}

// handedOver is told that cursors' workers were handed over (drained,
// flushed, released): they owe nothing any more.
func (r *reader) handedOver(ws []*worker) {
	r.mu.Lock()
	for _, w := range ws {
		delete(r.sh.owing[w.tp], w)
	}
	r.mu.Unlock()
	r.kickSettle()
}

// forget drops what partitions franz-go took away owe: it revoked or
// lost them, and the balancer reports them no more.
func (r *reader) forget(tps map[string][]int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for t, ps := range tps {
		for _, p := range ps {
			delete(r.sh.owing, topicPartition{t, p})
		}
	}
}

func (r *reader) kickSettle() {
	select {
	case r.sh.kick <- struct{}{}:
	default:
	}
}

// settler runs settle whenever kicked, until ctx ends. It is the
// reader's, so that neither franz-go's group goroutine (onSync) nor a
// worker's loop calls into the client.
func (r *reader) settler(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.sh.kick:
			r.settle()
		}
	}
}

// settle tells the balancer of every partition no cursor's worker owes
// ranges of any more, and once none owes any, asks for the rebalance
// that hands the released ranges over.
func (r *reader) settle() {
	r.mu.Lock()
	released := false
	for tp, owe := range r.sh.owing {
		if len(owe) > 0 {
			continue
		}
		r.sh.balancer.Released(tp.topic, tp.partition, r.sh.ranges[tp])
		delete(r.sh.owing, tp)
		released = true
	}
	busy := len(r.sh.owing) > 0
	r.mu.Unlock()
	if released && !busy {
		r.log.Info("key ranges released by every cursor; rebalancing to hand them over")
		r.client().ForceRebalance()
	}
}

// takeWorker removes w from the group's workers, false when it is no
// longer there.
func (g *group) takeWorker(w *worker) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.workers[w.tp] != w {
		return false
	}
	delete(g.workers, w.tp)
	return true
}

// handOver hands w's partition over off the caller's goroutine: drained,
// flushed, committed, released, as on a revoke. runCursor waits for it.
func (g *group) handOver(w *worker) {
	g.handovers.Go(func() {
		g.log.Info("partition handed over: hash 0 moved to another node", "topic", w.tp.topic, "partition", w.tp.partition)
		g.releaseAll([]*worker{w}, true)
	})
}
