package dispatcher

import (
	"sync"
	"time"

	"github.com/keyhook/keyhook/breaker"
	"github.com/keyhook/keyhook/webhooks"
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
	// let hands the task the breaker's pass for its next attempt (nil
	// with breakers off), to report that attempt's verdict with.
	let(pass *breakerPass)
	// hold tells the task it was held back d by keyhook (its rate limit,
	// its origin's breaker): time its retry budget does not count.
	hold(d time.Duration)
}

// pool is a subscription's delivery slots: at most MaxInFlight attempts
// run at once, so MaxInFlight bounds the attempts in flight, not the
// deliveries under way. A slot is a token in slots, not a parked
// goroutine: a worker takes one by sending into slots (a case of its
// loop's select, so it never blocks on the pool, and what finds no free
// slot waits in the worker's machine), and a goroutine is started for
// the task; it runs the tasks due meanwhile back to back, then gives the
// slot back and exits, so an idle subscription has no delivery
// goroutine. A task that must wait for its next attempt (a retry, a
// blocked key) gives its slot back and waits on a timer; when the timer
// fires it takes a free slot, or queues for the next slot given back.
// Its record stays the head of its lane meanwhile, so its key stays
// blocked while the others flow, and what waits costs a timer and the
// task's state, bounded by the partitions' windows.
//
// Redriven dead letters have slots of their own (redriveSlots), beside
// the subscription's in-flight budget, taken and run the same way.
type pool struct {
	g *group
	// slots holds a token per attempt running or about to; its capacity
	// is MaxInFlight.
	slots chan struct{}
	// redriveSlots does the same for redrives: they are an operator's
	// rare action, and must not wait behind a backlog.
	redriveSlots chan struct{}
	// running counts the pool's goroutines, so the group stops only
	// once the last returned.
	running sync.WaitGroup

	mu sync.Mutex
	// due are the tasks whose wait ended while every slot was taken,
	// oldest first. Non-empty only while every slot is taken: a slot is
	// given back (under mu) only when nothing is due.
	due []task
	// waiting are the tasks waiting on a timer or on their origin's
	// breaker, by worker, so a drain finds its own at once.
	waiting map[*worker]map[task]waitEntry
	// closed is set once the group stopped: no goroutine starts after.
	closed bool

	// rate holds attempts back to the subscription's rate limit; nil
	// without one.
	rate *rateGate
	// br is the breaker of the endpoint's origin on this node; nil with
	// breakers off.
	br *breaker.Breaker
}

// waitEntry is a task waiting: on timer, or, when nil, on the breaker
// since then.
type waitEntry struct {
	timer *time.Timer
	since time.Time
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
	p := &pool{
		g:            g,
		slots:        make(chan struct{}, g.sub.MaxInFlight),
		redriveSlots: make(chan struct{}, min(max(g.sub.MaxInFlight, 1), 16)),
		waiting:      make(map[*worker]map[task]waitEntry),
	}
	if g.sub.RateLimit.Enabled() {
		p.rate = newRateGate(p, g.sub.RateLimit, g.n.rateTokens)
	}
	if origin, err := webhooks.Origin(g.sub.Endpoint.URL); err == nil {
		p.br = g.n.breakers.For(origin)
	}
	return p
}

// gated reports whether the pool holds attempts back (a rate limit, a
// breaker): a task then makes one attempt per run.
func (p *pool) gated() bool { return p.rate != nil || p.br != nil }

// startJob delivers j in the slot its worker just took (by sending into
// slots). The flight is built here, off the worker's loop: rendering is
// the delivery's cost, not the partition's.
func (p *pool) startJob(j job) {
	p.running.Add(1)
	p.g.n.spawn.spawn(func() {
		defer p.running.Done()
		p.serve(p.g.newFlight(j.w, j.rec, nil))
	})
}

// startBatch does the same for a batch.
func (p *pool) startBatch(w *worker, jobs []job) {
	p.running.Add(1)
	p.g.n.spawn.spawn(func() {
		defer p.running.Done()
		p.serve(p.g.newBatchFlight(w, jobs))
	})
}

// startRedrive delivers an injected redrive in the redrive slot its
// worker just took.
func (p *pool) startRedrive(j job) {
	p.running.Add(1)
	go func() {
		defer p.running.Done()
		defer func() { <-p.redriveSlots }()
		p.g.redriver.deliver(j)
	}()
}

// serve runs t in the slot the caller holds, then every task due, one
// attempt at a time, and gives the slot back once nothing is due.
func (p *pool) serve(t task) {
	for t != nil {
		p.run(t)
		t = p.next()
	}
}

// run makes one attempt of t and parks it when it must wait. The
// in-flight gauge counts attempts (a batch request is one), which
// MaxInFlight bounds.
func (p *pool) run(t task) {
	if !t.owner().owned() {
		// The partition's ownership lease ran out (worker.lease), or
		// the coordinator stopped answering (group.live), between its
		// dispatch and now, or while the task waited for a retry: it
		// waits as a retry does (keyhook_retrying counts it) until both
		// confirm the ownership again, or the fence stops it
		// (stopRetries).
		p.park(t, p.g.n.cfg.FlushInterval)
		return
	}
	// The rate limit, then the breaker: a task holding a token that finds
	// its origin's breaker open keeps the token for when it closes.
	if p.rate != nil && !p.rate.admit(t) {
		return
	}
	var pass *breakerPass
	if p.br != nil {
		var ok bool
		if pass, ok = p.pass(t); !ok {
			return
		}
	}
	t.let(pass)
	p.g.inFlight.Add(1)
	wait, done := t.step()
	p.g.inFlight.Add(-1)
	pass.end()
	if !done {
		p.park(t, wait)
	}
}

// pass asks the origin's breaker to let t's attempt through. Refused, t
// waits off every slot, its attempt number where it was, until the
// breaker half-opens or closes and wakes it. t is among the waiting
// before the breaker is asked, so a wake that comes at once finds it.
func (p *pool) pass(t task) (*breakerPass, bool) {
	// Closed, as it is nearly always: no waiting to register.
	if bp, ok := p.br.TryAllow(); ok {
		return &breakerPass{b: p.br, p: bp}, true
	}
	w := t.owner()
	p.mu.Lock()
	if w.noRetries.Load() {
		p.mu.Unlock()
		t.stop()
		return nil, false
	}
	p.addWaiting(w, t, waitEntry{since: time.Now()})
	p.mu.Unlock()
	bp, ok := p.br.Allow(func() { p.wake(t) })
	if !ok {
		return nil, false
	}
	p.mu.Lock()
	_, was := p.unwait(w, t)
	p.mu.Unlock()
	if !was {
		// Stopped meanwhile (stopRetries): no attempt.
		p.br.Release(bp)
		return nil, false
	}
	return &breakerPass{b: p.br, p: bp}, true
}

// next takes the oldest due task for the caller's slot, or, with none
// due, gives the slot back and returns nil. Both under mu, with wake's
// attempt to take a slot: a task found no slot only while every slot was
// taken, and each holder looks at due before giving its slot back, so no
// task stays due while a slot is free.
func (p *pool) next() task {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.due) == 0 {
		<-p.slots
		return nil
	}
	t := p.due[0]
	p.due[0] = nil
	p.due = p.due[1:]
	return t
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
	p.addWaiting(w, t, waitEntry{timer: time.AfterFunc(d, func() { p.wake(t) })})
	p.mu.Unlock()
}

// addWaiting counts t among the waiting. Under mu.
func (p *pool) addWaiting(w *worker, t task, e waitEntry) {
	ws := p.waiting[w]
	if ws == nil {
		ws = make(map[task]waitEntry)
		p.waiting[w] = ws
	}
	p.g.retrying.Add(t.size())
	ws[t] = e
}

// wake moves t from waiting to a free slot, or to due when none is free,
// unless it was stopped meanwhile.
func (p *pool) wake(t task) {
	w := t.owner()
	p.mu.Lock()
	e, ok := p.unwait(w, t)
	if !ok {
		p.mu.Unlock()
		return
	}
	if e.timer == nil {
		t.hold(time.Since(e.since))
	}
	p.startLocked(t)
}

// resume runs t, let through by the rate gate, in a free slot or the
// next one given back.
func (p *pool) resume(t task) {
	p.mu.Lock()
	p.startLocked(t)
}

// startLocked starts t in a free slot, or queues it as due; it unlocks
// mu.
func (p *pool) startLocked(t task) {
	if p.closed {
		p.mu.Unlock()
		t.stop()
		return
	}
	select {
	case p.slots <- struct{}{}:
		p.running.Add(1)
		go func() {
			defer p.running.Done()
			p.serve(t)
		}()
	default:
		p.due = append(p.due, t)
	}
	p.mu.Unlock()
}

// close waits for the pool's goroutines to end, once every worker of the
// group stopped (their tasks end with their deliveryCtx); a timer firing
// after stops its task instead of starting a goroutine.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	if p.rate != nil {
		p.rate.close()
	}
	p.running.Wait()
}

// unwait removes t from the waiting set; false when it was not there.
func (p *pool) unwait(w *worker, t task) (waitEntry, bool) {
	ws := p.waiting[w]
	e, ok := ws[t]
	if !ok {
		return e, false
	}
	if e.timer != nil {
		e.timer.Stop()
	}
	delete(ws, t)
	if len(ws) == 0 {
		delete(p.waiting, w)
	}
	p.g.retrying.Add(-t.size())
	return e, true
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
	if p.rate != nil {
		stopped = append(stopped, p.rate.drop(w)...)
	}
	for _, t := range stopped {
		t.stop()
	}
}
