package dispatcher

import (
	"sync"
	"time"
)

// spareFor is how long a goroutine that finished its task waits at least
// for another before it ends (at most twice as long).
const spareFor = time.Second

// spawner starts the node's short tasks (a delivery, a turn of a
// partition's loop) on goroutines, reusing one that finished a task
// within spareFor. With a thousand subscriptions a node starts tens of
// thousands of such goroutines a second, and each new one grew its stack
// from the minimum again on its way into the HTTP client or the loop:
// copying stacks took a tenth of the node's CPU. A reused goroutine keeps
// its grown stack; an idle node keeps none past spareFor.
//
// The node owns it; stop ends the spares that wait. A task's own owner
// (the pool, the worker) still waits for it as it did for a goroutine.
type spawner struct {
	// tasks hands a task to a spare that waits; unbuffered, so a send
	// succeeds only when one does.
	tasks    chan func()
	done     chan struct{}
	stopOnce sync.Once
}

func newSpawner() *spawner {
	return &spawner{tasks: make(chan func()), done: make(chan struct{})}
}

// spawn runs f on a spare goroutine, or on a new one when none waits (or
// without a spawner, as a node built in a test has none).
func (s *spawner) spawn(f func()) {
	if s == nil {
		go f()
		return
	}
	select {
	case s.tasks <- f:
	default:
		go s.run(f)
	}
}

// run runs f, then the tasks handed to it, until a whole spareFor passed
// without one, or stop. Its timer is not reset per task (at tens of
// thousands of tasks a second that was the spares' main cost): it fires
// every spareFor, and ends the goroutine when no task came since.
func (s *spawner) run(f func()) {
	f()
	t := time.NewTimer(spareFor)
	defer t.Stop()
	ran := false
	for {
		select {
		case f := <-s.tasks:
			f()
			ran = true
		case <-t.C:
			if !ran {
				return
			}
			ran = false
			t.Reset(spareFor)
		case <-s.done:
			return
		}
	}
}

// stop ends the spares waiting now and those that finish a task later;
// spawn still runs tasks after it, each on a goroutine that ends with it.
func (s *spawner) stop() { s.stopOnce.Do(func() { close(s.done) }) }
