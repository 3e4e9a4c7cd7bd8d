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
// its grown stack; an idle node keeps none past 2×spareFor.
//
// Each spare waits on a channel of its own, the most recently parked
// handed the next task: one shared channel, and a select over it and a
// timer in every spare, cost more in locks than the stacks saved at
// 40,000 deliveries a second. A janitor goroutine, running while spares
// exist, ends those idle for spareFor.
//
// The node owns it; stop ends the spares that wait and the janitor. A
// task's own owner (the pool, the worker) still waits for it as it did
// for a goroutine.
type spawner struct {
	// mu guards the fields below it.
	mu sync.Mutex
	// idle are the spares waiting, the longest idle first.
	idle []*spare
	// spares counts the spare goroutines alive, busy or idle.
	spares int
	// janitor is set while the janitor runs; stopped once stop ran.
	janitor, stopped bool
	done             chan struct{}
}

// spare is one reusable goroutine.
type spare struct {
	// tasks hands it its next task; nil ends it.
	tasks chan func()
	// parked is when it last went idle; guarded by spawner.mu.
	parked time.Time
}

func newSpawner() *spawner { return &spawner{done: make(chan struct{})} }

// spawn runs f on a spare goroutine, or on a new one when none waits (or
// without a spawner, as a node built in a test has none).
func (s *spawner) spawn(f func()) {
	if s == nil {
		go f()
		return
	}
	s.mu.Lock()
	if n := len(s.idle); n > 0 {
		sp := s.idle[n-1]
		s.idle[n-1] = nil
		s.idle = s.idle[:n-1]
		s.mu.Unlock()
		sp.tasks <- f
		return
	}
	s.spares++
	if !s.janitor && !s.stopped {
		s.janitor = true
		go s.clean()
	}
	s.mu.Unlock()
	go s.run(&spare{tasks: make(chan func(), 1)}, f)
}

// run runs f, then the tasks handed to sp, until it is handed nil or the
// spawner stopped.
func (s *spawner) run(sp *spare, f func()) {
	for f != nil {
		f()
		if !s.park(sp) {
			break
		}
		f = <-sp.tasks
	}
	s.mu.Lock()
	s.spares--
	s.mu.Unlock()
}

// park puts sp among the idle; false once the spawner stopped.
func (s *spawner) park(sp *spare) bool {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return false
	}
	sp.parked = now
	s.idle = append(s.idle, sp)
	return true
}

// clean ends, every spareFor, the spares idle since the last time, until
// none is left or stop.
func (s *spawner) clean() {
	t := time.NewTicker(spareFor)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		cutoff := time.Now().Add(-spareFor)
		s.mu.Lock()
		n := 0
		for n < len(s.idle) && s.idle[n].parked.Before(cutoff) {
			n++
		}
		old := append([]*spare(nil), s.idle[:n]...)
		rest := copy(s.idle, s.idle[n:])
		clear(s.idle[rest:])
		s.idle = s.idle[:rest]
		last := s.spares == len(old)
		if last {
			s.janitor = false
		}
		s.mu.Unlock()
		for _, sp := range old {
			sp.tasks <- nil
		}
		if last {
			return
		}
	}
}

// stop ends the spares waiting now, those that finish a task later, and
// the janitor; spawn still runs tasks after it, each on a goroutine that
// ends with it.
func (s *spawner) stop() {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.stopped = true
	idle := s.idle
	s.idle = nil
	s.mu.Unlock()
	close(s.done)
	for _, sp := range idle {
		sp.tasks <- nil
	}
}
