package dispatcher

import (
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The hand-off of records to the delivery pool. The worker's machine owns
// every entry, and only the worker's loop touches one. The pool gets a
// job, a value it owns: the fetched record, which no one changes once it
// is fetched, and for a batch the key lane it belongs to. The record also
// names its entry when the result comes back: every entry has a record of
// its own (a fetch, a re-read and a redrive each make a new one), and the
// worker's outbox maps it back. The one thing the loop may learn of a
// record while it is out, that the topic's retention is about to delete
// it, the delivery asks the outbox.

// job is one record handed to the delivery pool, with the worker its
// result goes back to.
type job struct {
	w   *worker
	rec *kgo.Record
	// lane is the key of the record's lane, laned false when it has none
	// (ordering none, or no key under ordering key): a batch keeps each
	// lane's records in order.
	lane  string
	laned bool
}

// result is what the delivery pool hands back to a worker.
type result struct {
	// rec is the record of the job, naming its entry.
	rec *kgo.Record
	// acked: delivered or dead-lettered. False means the attempt was
	// aborted (shutdown, lost partition): the record stays pending.
	acked bool
}

// dispatch hands e, the entry Peek returned, to the pool, in the
// delivery slot the loop just took.
func (w *worker) dispatch(e *record) {
	_ = w.m.Dispatch(e)
	w.g.pool.startJob(w.outbox.send(w, e))
}

// dispatchReady hands the pool the records ready now, as long as a
// delivery slot is free for each: a channel operation per record rather
// than a turn of run's select over all its cases, which was a tenth of
// the worker's time at full load.
func (w *worker) dispatchReady() {
	for e := w.m.Peek(); e != nil; e = w.m.Peek() {
		select {
		case w.g.pool.slots <- struct{}{}:
			w.dispatch(e)
		default:
			return
		}
	}
}

// dispatchRedrive hands e, the entry PeekExtra returned, to the pool, in
// the redrive slot the loop just took.
func (w *worker) dispatchRedrive(e *record) {
	_ = w.m.DispatchExtra(e)
	w.g.pool.startRedrive(w.outbox.send(w, e))
}

// dispatchBatch hands the batch offered to the pool, in the delivery slot
// the loop just took.
func (w *worker) dispatchBatch() {
	w.m.DispatchBatch(w.offer)
	jobs := make([]job, len(w.offer))
	for i, e := range w.offer {
		jobs[i] = w.outbox.send(w, e)
	}
	w.g.pool.startBatch(w, jobs)
	w.offer = nil
}

// outbox is a worker's records out with the delivery pool.
type outbox struct {
	// out maps each record out to its entry; only the loop uses it.
	out map[*kgo.Record]*record
	// mu guards expiring: the records out that the retention guard found
	// about to be deleted, which their deliveries read.
	mu       sync.Mutex
	expiring map[*kgo.Record]bool
}

// send hands entry e over: the job the pool gets for it. The loop calls
// it as the machine marks e dispatched.
func (o *outbox) send(w *worker, e *record) job {
	if o.out == nil {
		o.out = make(map[*kgo.Record]*record)
	}
	if _, dup := o.out[e.Payload]; dup {
		panic("dispatcher: a record handed to the pool twice: two entries share a fetched record")
	}
	o.out[e.Payload] = e
	if e.Expiring() {
		o.markExpiring(e.Payload)
	}
	j := job{w: w, rec: e.Payload}
	j.lane, j.laned = e.LaneKey()
	return j
}

// take returns the entry a result names and forgets it; false when no
// record of that name is out.
func (o *outbox) take(r *kgo.Record) (*record, bool) {
	e, ok := o.out[r]
	if !ok {
		return nil, false
	}
	delete(o.out, r)
	if e.Expiring() {
		o.mu.Lock()
		delete(o.expiring, r)
		o.mu.Unlock()
	}
	return e, true
}

// expired tells the deliveries in flight of the entries the retention
// guard marked expiring since they went out. The loop calls it after
// the machine's Expire.
func (o *outbox) expired() {
	for r, e := range o.out {
		if e.Expiring() {
			o.markExpiring(r)
		}
	}
}

func (o *outbox) markExpiring(r *kgo.Record) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.expiring == nil {
		o.expiring = make(map[*kgo.Record]bool)
	}
	o.expiring[r] = true
}

// isExpiring reports whether the retention guard found r, a record out,
// about to be deleted. Any goroutine may call it.
func (o *outbox) isExpiring(r *kgo.Record) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.expiring[r]
}
