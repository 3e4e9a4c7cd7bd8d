package dispatcher

import (
	"context"
	"sync"
	"time"
)

// task is a delivery the pool runs one attempt at a time: a record's
// (flight) or a batch's (batchFlight). Only the pool calls its methods,
// never two at once.
type task interface {
	// step makes the task's next attempt, in a slot of the pool. It
	// returns done once the delivery ended and its records went back to
	// their worker; otherwise the task waits wait before its next step.
	step() (wait time.Duration, done bool)
	// stop ends the task without another attempt (its partition drains or
	// is lost): its records go back to their worker unacked.
	stop()
	// owner is the worker whose records the task delivers.
	owner() *worker
	// size is how many deliveries (records) the task carries: what the
	// retrying gauge counts while it waits.
	size() int64
}

// pool is a subscription's delivery slots: MaxInFlight goroutines, each
// running one attempt at a time, so MaxInFlight bounds the attempts in
// flight, not the deliveries under way. A task that must wait for its
// next attempt (a retry, a blocked key) gives its slot back and waits on
// a timer; when the timer fires it queues for the next free slot. Its
// record stays the head of its lane meanwhile, so its key stays blocked
// while the others flow, and what waits costs a timer and the task's
// state, bounded by the partitions' windows.
type pool struct {
	g *group
	// ready wakes one slot when a task is due.
	ready chan struct{}

	mu sync.Mutex
	// due are the tasks whose wait ended, oldest first.
	due []task
	// waiting are the tasks waiting on a timer, by worker, so a drain
	// finds its own at once.
	waiting map[*worker]map[task]*time.Timer
}

// attemptTimeout is the timeout of one attempt of the subscription: its
// endpoint's, else the node's.
func (g *group) attemptTimeout() time.Duration {
	if ms := g.sub.Endpoint.TimeoutMS; ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return g.n.cfg.RequestTimeout
}

func newPool(g *group) *pool {
	return &pool{g: g, ready: make(chan struct{}, 1), waiting: make(map[*worker]map[task]*time.Timer)}
}

// loop is one slot: it runs the tasks that are due and the deliveries the
// workers hand over, one attempt at a time, until ctx ends.
func (p *pool) loop(ctx context.Context) {
	g := p.g
	for {
		var t task
		select {
		case <-ctx.Done():
			return
		case <-p.ready:
			if t = p.pop(); t == nil {
				continue
			}
		case j := <-g.jobs:
			t = g.newFlight(j.w, j.rec, nil)
		case b := <-g.batches:
			t = g.newBatchFlight(b.w, b.recs)
		}
		p.run(t)
	}
}

// run makes one attempt of t and parks it when it must wait. The
// in-flight gauge counts attempts (a batch request is one), which
// MaxInFlight bounds.
func (p *pool) run(t task) {
	if !t.owner().owned() {
		// The partition's ownership lease ran out (worker.leaseEnd), or
		// the coordinator stopped answering (group.live), between its
		// dispatch and now, or while the task waited for a retry: it
		// waits as a retry does (keyhook_retrying counts it) until both
		// confirm the ownership again, or the fence stops it
		// (stopRetries).
		p.park(t, p.g.n.cfg.FlushInterval)
		return
	}
	p.g.inFlight.Add(1)
	wait, done := t.step()
	p.g.inFlight.Add(-1)
	if !done {
		p.park(t, wait)
	}
}

// pop takes the oldest due task and passes the wake-up on while more are
// due (ready holds one signal however many tasks are due).
func (p *pool) pop() task {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.due) == 0 {
		return nil
	}
	t := p.due[0]
	p.due[0] = nil
	p.due = p.due[1:]
	if len(p.due) > 0 {
		p.signal()
	}
	return t
}

func (p *pool) signal() {
	select {
	case p.ready <- struct{}{}:
	default:
	}
}

// park lets t wait d for its next attempt off every slot; a task of a
// worker that stopped retrying (drain, lost partition) stops instead.
func (p *pool) park(t task, d time.Duration) {
	w := t.owner()
	p.mu.Lock()
	if w.noRetries.Load() {
		p.mu.Unlock()
		t.stop()
		return
	}
	ws := p.waiting[w]
	if ws == nil {
		ws = make(map[task]*time.Timer)
		p.waiting[w] = ws
	}
	p.g.retrying.Add(t.size())
	ws[t] = time.AfterFunc(d, func() { p.wake(t) })
	p.mu.Unlock()
}

// wake moves t from waiting to due, unless it was stopped meanwhile.
func (p *pool) wake(t task) {
	w := t.owner()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.unwait(w, t) {
		return
	}
	p.due = append(p.due, t)
	p.signal()
}

// unwait removes t from the waiting set; false when it was not there.
func (p *pool) unwait(w *worker, t task) bool {
	ws := p.waiting[w]
	tm, ok := ws[t]
	if !ok {
		return false
	}
	tm.Stop()
	delete(ws, t)
	if len(ws) == 0 {
		delete(p.waiting, w)
	}
	p.g.retrying.Add(-t.size())
	return true
}

// stopRetries ends w's deliveries that wait for their next attempt, at
// once and without another attempt, and makes those in flight end after
// their attempt instead of waiting for another: the partition drains or
// is lost. Their records go back to w unacked (still pending, so the next
// owner delivers them; their last attempt failed, so nothing is
// duplicated).
func (p *pool) stopRetries(w *worker) {
	p.mu.Lock()
	w.noRetries.Store(true)
	var stopped []task
	for t := range p.waiting[w] {
		p.unwait(w, t)
		stopped = append(stopped, t)
	}
	kept := p.due[:0]
	for _, t := range p.due {
		if t.owner() == w {
			stopped = append(stopped, t)
			continue
		}
		kept = append(kept, t)
	}
	clear(p.due[len(kept):])
	p.due = kept
	p.mu.Unlock()
	for _, t := range stopped {
		t.stop()
	}
}
