package dispatcher

import (
	"bytes"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/keyhook/keyhook/internal/testutil"
)

// goroutineID is the calling goroutine's number, from its stack's header.
func goroutineID() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	f := bytes.Fields(b)
	return string(f[1])
}

// A task spawned after another finished runs on the same goroutine (it
// keeps its grown stack), every task runs once, and the spares end after
// spareFor or at stop: an idle node keeps none.
func TestSpawnerReusesAGoroutineAndKeepsNoneIdle(t *testing.T) {
	base := runtime.NumGoroutine()
	s := newSpawner()

	reused := false
	for range 50 {
		ids := make(chan string, 1)
		s.spawn(func() { ids <- goroutineID() })
		first := <-ids
		time.Sleep(10 * time.Millisecond) // the goroutine is back waiting
		s.spawn(func() { ids <- goroutineID() })
		if <-ids == first {
			reused = true
			break
		}
	}
	if !reused {
		t.Fatal("a task spawned after another finished never ran on its goroutine")
	}

	var mu sync.Mutex
	ran := map[int]int{}
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		s.spawn(func() {
			defer wg.Done()
			mu.Lock()
			ran[i]++
			mu.Unlock()
		})
	}
	wg.Wait()
	for i := range 200 {
		if ran[i] != 1 {
			t.Fatalf("task %d ran %d times, want once", i, ran[i])
		}
	}

	testutil.WaitFor(t, 2*spareFor+5*time.Second, "the spares gone after spareFor", func() bool { return runtime.NumGoroutine() <= base })
	done := make(chan struct{})
	s.spawn(func() { close(done) })
	<-done
	s.stop()
	testutil.WaitFor(t, spareFor/2, "the spares gone at stop", func() bool { return runtime.NumGoroutine() <= base })
	// After stop a task still runs.
	done = make(chan struct{})
	s.spawn(func() { close(done) })
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a task spawned after stop did not run")
	}
}
