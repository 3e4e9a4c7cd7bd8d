package dispatcher

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// loopUnderTest is a loop of events posted as a count and a wake signal,
// the way a worker's mailbox posts them.
type loopUnderTest struct {
	d        *dormant
	wake     chan struct{}
	mu       sync.Mutex
	posted   int
	handled  atomic.Int64
	running  atomic.Int32
	overlaps atomic.Int32
	stop     atomic.Bool
	ended    atomic.Int32
}

func newLoopUnderTest() *loopUnderTest {
	l := &loopUnderTest{wake: make(chan struct{}, 1)}
	l.d = newDormant(func(f func()) { go f() }, l.turns, func() bool { return len(l.wake) > 0 || l.stop.Load() }, func() { l.ended.Add(1) })
	return l
}

func (l *loopUnderTest) post() {
	l.mu.Lock()
	l.posted++
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	l.d.kick()
}

func (l *loopUnderTest) turns() bool {
	if l.running.Add(1) != 1 {
		l.overlaps.Add(1)
	}
	defer l.running.Add(-1)
	for {
		if l.stop.Load() {
			return true
		}
		select {
		case <-l.wake:
			l.mu.Lock()
			n := l.posted
			l.mu.Unlock()
			l.handled.Store(int64(n))
		default:
			// Widen the window between finding nothing and going to
			// sleep, where a post finds the loop still awake.
			runtime.Gosched()
			return false
		}
	}
}

// Every event reaches a loop that sleeps between events without a
// goroutine, however its posts race with it going to sleep, and the loop
// never runs on two goroutines at once.
func TestADormantLoopMissesNoEventAndNeverRunsTwice(t *testing.T) {
	l := newLoopUnderTest()
	l.d.begin()
	const senders, each = 8, 20000
	var wg sync.WaitGroup
	for range senders {
		wg.Go(func() {
			for i := range each {
				l.post()
				if i%100 == 0 {
					time.Sleep(time.Microsecond) // let the loop fall asleep now and then
				}
			}
		})
	}
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for l.handled.Load() != senders*each && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := l.handled.Load(); got != senders*each {
		t.Fatalf("the loop handled %d of %d events and sleeps: a wake-up was lost", got, senders*each)
	}
	if n := l.overlaps.Load(); n > 0 {
		t.Errorf("the loop ran on two goroutines at once %d times", n)
	}
	testutilWait(t, "the loop asleep once nothing is left", l.d.asleep)

	l.stop.Store(true)
	l.d.kick()
	testutilWait(t, "the loop ended", func() bool { return l.ended.Load() == 1 })
	l.post() // no goroutine starts for an ended loop
	time.Sleep(10 * time.Millisecond)
	if n := l.ended.Load(); n != 1 {
		t.Errorf("end ran %d times, want once", n)
	}
}

// Before begin no event starts the loop: they wait in the mail for it.
func TestADormantLoopRunsNothingBeforeItBegins(t *testing.T) {
	l := newLoopUnderTest()
	l.post()
	time.Sleep(20 * time.Millisecond)
	if l.handled.Load() != 0 || l.running.Load() != 0 {
		t.Fatal("an event started the loop before it began")
	}
	l.d.begin()
	testutilWait(t, "the event posted before begin handled", func() bool { return l.handled.Load() == 1 })
}

func testutilWait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}
