package dispatcher

import "sync/atomic"

// dormant gives a loop a goroutine only while it has something to do. The
// loop's turns run until nothing is left but waiting for an event; then
// its goroutine ends, and the next event starts one (kick). Events must
// be recorded where pending sees them before they kick: the goroutine
// clears awake before it looks a last time, so either it sees the event
// and goes on, or the kick sees awake cleared and starts a new goroutine.
// One of them runs the loop, never both.
type dormant struct {
	// awake is set while the loop has a goroutine or one is starting, and
	// from the start until begin: the one that sets it starts it.
	awake atomic.Bool
	// turns runs the loop until it has nothing but events to wait for
	// (false) or it ended (true); pending reports whether an event is
	// waiting; end runs once, when the loop ended.
	turns   func() (ended bool)
	pending func() bool
	end     func()
	// spawn starts the loop's goroutine (spawner.spawn).
	spawn func(func())
}

// newDormant returns a loop that runs nothing before begin, its
// goroutines started by spawn.
func newDormant(spawn func(func()), turns func() bool, pending func() bool, end func()) *dormant {
	d := &dormant{turns: turns, pending: pending, end: end, spawn: spawn}
	d.awake.Store(true)
	return d
}

// begin starts the loop's first goroutine; events before it wait for it.
func (d *dormant) begin() { d.spawn(d.run) }

// kick starts the loop's goroutine unless it runs.
func (d *dormant) kick() {
	if d.awake.CompareAndSwap(false, true) {
		d.spawn(d.run)
	}
}

// asleep reports whether the loop has no goroutine.
func (d *dormant) asleep() bool { return !d.awake.Load() }

func (d *dormant) run() {
	for {
		if d.turns() {
			// awake stays set: no kick starts an ended loop.
			d.end()
			return
		}
		d.awake.Store(false)
		if !d.pending() || !d.awake.CompareAndSwap(false, true) {
			return
		}
	}
}
