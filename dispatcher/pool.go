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
	// heldSlot is where the pool puts the slot of the endpoint's origin
	// it took for the task's next attempt; what the step leaves there
	// unspent, the pool gives back.
	heldSlot() *webhooks.Slot
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
// The endpoint origin's limiter (webhooks.Limiters, shared by every
// subscription of the node pointing at the origin) is waited on here too:
// a task whose origin has no free slot keeps its pool slot and waits as a
// waiter of the limiter, without a goroutine, until the slot that frees
// starts one for it (admitted). A thousand subscriptions behind one
// capped origin so cost their tasks, not a parked goroutine and its stack
// each.
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
	// origin is the limiter of the endpoint's origin, which the pool
	// waits on itself; nil when the sender waits for it (or has none).
	origin *webhooks.Limiter
	// atOrigin are the tasks waiting for a slot of origin, by worker,
	// each holding the pool slot it took. Under mu.
	atOrigin map[*worker]map[task]*originWait
}

// originWait is a task waiting for its origin's slot: the breaker's pass
// it holds, and how to withdraw from the limiter (nil until the wait is
// queued).
type originWait struct {
	pass   *breakerPass
	cancel func() bool
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
		atOrigin:     make(map[*worker]map[task]*originWait),
	}
	if g.n.slotted != nil {
		p.origin = g.n.slotted.Limiter(g.sub.Endpoint.URL)
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
// breaker, its origin's limiter): a task then makes one attempt per run.
func (p *pool) gated() bool { return p.rate != nil || p.br != nil || p.origin != nil }

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
// attempt at a time, and gives the slot back once nothing is due, or
// hands it to a task that waits for its origin with it.
func (p *pool) serve(t task) {
	for t != nil {
		if p.run(t) {
			return
		}
		t = p.next()
	}
}

// run makes one attempt of t and parks it when it must wait; kept when t
// keeps the caller's slot to wait for its origin's.
func (p *pool) run(t task) (kept bool) {
	if !t.owner().owned() {
		// The partition's ownership lease ran out (worker.lease), or
		// the coordinator stopped answering (group.live), between its
		// dispatch and now, or while the task waited for a retry: it
		// waits as a retry does (keyhook_retrying counts it) until both
		// confirm the ownership again, or the fence stops it
		// (stopRetries).
		p.park(t, p.g.n.cfg.FlushInterval)
		return false
	}
	// The rate limit, then the breaker, then the origin's slot: a task
	// holding a token that finds its origin's breaker open keeps the
	// token for when it closes, and a breaker's pass is held while the
	// origin has no slot free, as the attempt it lets through.
	if p.rate != nil && !p.rate.admit(t) {
		return false
	}
	var pass *breakerPass
	if p.br != nil {
		var ok bool
		if pass, ok = p.pass(t); !ok {
			return false
		}
	}
	if p.origin != nil {
		s, ok := p.origin.TryAcquire()
		if !ok {
			p.waitOrigin(t, pass)
			return true
		}
		*t.heldSlot() = s
	}
	p.attempt(t, pass)
	return false
}

// attempt makes t's step with pass (and the origin's slot t holds, if
// any) and parks it when it must wait. The in-flight gauge counts
// attempts (a batch request is one), which MaxInFlight bounds.
func (p *pool) attempt(t task, pass *breakerPass) {
	t.let(pass)
	p.g.inFlight.Add(1)
	wait, done := t.step()
	p.g.inFlight.Add(-1)
	t.heldSlot().Release(0) // the step made no attempt in it
	pass.end()
	if !done {
		p.park(t, wait)
	}
}

// waitOrigin queues t, holding the caller's pool slot, for a slot of its
// origin; admitted runs it once one frees. Counted in flight meanwhile,
// as the attempt it is about to make. t is among atOrigin before the
// limiter is asked, so a grant that comes at once finds it.
func (p *pool) waitOrigin(t task, pass *breakerPass) {
	w := t.owner()
	ow := &originWait{pass: pass}
	p.mu.Lock()
	if w.noRetries.Load() || p.closed {
		p.handOnLocked()
		p.mu.Unlock()
		pass.end()
		t.stop()
		return
	}
	ws := p.atOrigin[w]
	if ws == nil {
		ws = make(map[task]*originWait)
		p.atOrigin[w] = ws
	}
	ws[t] = ow
	p.g.inFlight.Add(1)
	p.mu.Unlock()
	cancel := p.origin.Wait(func(s webhooks.Slot) { p.admitted(t, s) })
	p.mu.Lock()
	if p.atOrigin[w][t] == ow {
		ow.cancel, cancel = cancel, nil
	}
	p.mu.Unlock()
	if cancel != nil {
		// Granted at once, or stopped meanwhile (stopRetries), before
		// the wait could be noted: a grant still to come finds t gone
		// and gives its slot back.
		cancel()
	}
}

// admitted runs t, granted s by its origin, in the pool slot it kept;
// a t stopped meanwhile gives s back unspent.
func (p *pool) admitted(t task, s webhooks.Slot) {
	w := t.owner()
	p.mu.Lock()
	ow, ok := p.unwaitOrigin(w, t)
	if !ok {
		p.mu.Unlock()
		s.Release(0)
		return
	}
	if p.closed {
		p.handOnLocked()
		p.mu.Unlock()
		s.Release(0)
		ow.pass.end()
		t.stop()
		return
	}
	p.running.Add(1)
	p.mu.Unlock()
	p.g.n.spawn.spawn(func() {
		defer p.running.Done()
		if !t.owner().owned() {
			// The ownership lapsed while t waited: no attempt until it
			// is confirmed again, as run would decide.
			s.Release(0)
			ow.pass.end()
			p.park(t, p.g.n.cfg.FlushInterval)
		} else {
			*t.heldSlot() = s
			p.attempt(t, ow.pass)
		}
		p.serve(p.next())
	})
}

// unwaitOrigin takes t out of atOrigin; false when it was not there.
// Under mu.
func (p *pool) unwaitOrigin(w *worker, t task) (*originWait, bool) {
	ws := p.atOrigin[w]
	ow, ok := ws[t]
	if !ok {
		return nil, false
	}
	delete(ws, t)
	if len(ws) == 0 {
		delete(p.atOrigin, w)
	}
	p.g.inFlight.Add(-1)
	return ow, true
}

// handOnLocked hands the pool slot of a task that will not run in it to
// the oldest due task, or gives it back when none is due, as next does.
// Under mu.
func (p *pool) handOnLocked() {
	t := p.nextLocked()
	if t == nil {
		return
	}
	p.running.Add(1)
	p.g.n.spawn.spawn(func() {
		defer p.running.Done()
		p.serve(t)
	})
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
	return p.nextLocked()
}

// nextLocked is next under mu.
func (p *pool) nextLocked() task {
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
	// Those waiting for their origin's slot hand their pool slot on. A
	// wait not noted yet is withdrawn by waitOrigin, a grant already
	// made is given back by admitted: neither finds t here any more.
	var passes []*breakerPass
	for t := range p.atOrigin[w] {
		ow, _ := p.unwaitOrigin(w, t)
		if ow.cancel != nil {
			ow.cancel()
		}
		p.handOnLocked()
		passes = append(passes, ow.pass)
		stopped = append(stopped, t)
	}
	p.mu.Unlock()
	for _, pass := range passes {
		pass.end()
	}
	if p.rate != nil {
		stopped = append(stopped, p.rate.drop(w)...)
	}
	for _, t := range stopped {
		t.stop()
	}
}
