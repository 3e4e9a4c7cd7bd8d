package dispatcher

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyhook/keyhook/webhooks"
)

// stepCounter is a task that counts its steps, each an attempt that ends
// the delivery.
type stepCounter struct {
	w       *worker
	steps   atomic.Int32
	stopped atomic.Bool
	slot    webhooks.Slot
}

func (s *stepCounter) step() (time.Duration, bool) {
	s.steps.Add(1)
	s.slot.Release(200)
	return 0, true
}
func (s *stepCounter) stop()                    { s.stopped.Store(true) }
func (s *stepCounter) owner() *worker           { return s.w }
func (s *stepCounter) size() int64              { return 1 }
func (s *stepCounter) let(*breakerPass)         {}
func (s *stepCounter) hold(time.Duration)       {}
func (s *stepCounter) heldSlot() *webhooks.Slot { return &s.slot }

// A delivery that waited for its origin's slot while its partition's
// ownership lapsed makes no attempt when the slot comes: it gives the
// slot back and waits, as one that found the lease lapsed before it
// asked, until the ownership is confirmed again; then it goes.
func TestAnOriginsSlotArrivingAfterTheOwnershipLapsedMakesNoAttempt(t *testing.T) {
	const length = 4 * time.Second
	w := leasedWorker(t, length)
	ls, err := webhooks.NewLimiters(webhooks.LimiterConfig{Max: 1})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := ls.For("http://127.0.0.1:1/")
	if err != nil {
		t.Fatal(err)
	}
	p := &pool{g: w.g, slots: make(chan struct{}, 1), waiting: make(map[*worker]map[task]waitEntry),
		atOrigin: make(map[*worker]map[task]*originWait), origin: lim}
	w.g.pool = p
	other, ok := lim.TryAcquire() // another subscription's attempt
	if !ok {
		t.Fatal("no slot in an idle limiter")
	}
	task := &stepCounter{w: w}
	p.slots <- struct{}{}
	p.serve(task)
	if n := lim.Waiting(); n != 1 {
		t.Fatalf("the task did not wait for its origin: %d waiting", n)
	}

	w.lease.end.Store(0) // the lease lapses while it waits
	other.Release(200)
	time.Sleep(3 * w.g.n.cfg.FlushInterval)
	if n := task.steps.Load(); n != 0 {
		t.Fatalf("the task made %d attempts with its ownership lapsed, want 0", n)
	}
	if n := lim.InFlight(); n != 0 {
		t.Fatalf("the origin has %d slots taken, want 0: the slot that came after the lapse must be given back", n)
	}

	w.lease.extend(w.since()) // confirmed again
	deadline := time.Now().Add(5 * time.Second)
	for task.steps.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := task.steps.Load(); n != 1 {
		t.Fatalf("the task made %d attempts once its ownership was confirmed, want 1", n)
	}
	p.close()
	if n, free := lim.InFlight(), len(p.slots); n != 0 || free != 0 {
		t.Errorf("after the attempt: %d origin slots and %d pool slots taken, want 0 and 0", n, free)
	}
}
