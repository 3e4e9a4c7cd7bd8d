package breaker

import (
	"sync/atomic"
	"testing"
	"time"
)

// A breaker held open wakes its waiters when its interval ends, by its own
// timer; one of them gets the probe, and its success closes the breaker,
// every transition reported once, in order.
func TestBreakerWakesWaitersAtHalfOpenAndReportsEachTransition(t *testing.T) {
	var changes []Transition
	s, err := NewSet(Config{Failures: 2, Interval: 50 * time.Millisecond, OnTransition: func(tr Transition) { changes = append(changes, tr) }})
	if err != nil {
		t.Fatal(err)
	}
	b := s.For("http://h:80")
	for range 2 {
		p, _ := b.Allow(nil)
		b.Report(p, Failure, "503")
	}
	woken := make(chan int, 10)
	for i := range 3 {
		if _, ok := b.Allow(func() { woken <- i }); ok {
			t.Fatal("an open breaker let an attempt through")
		}
	}
	if got := s.NotClosed(); len(got) != 1 || got[0].State != "open" || got[0].Waiting != 3 {
		t.Fatalf("NotClosed = %+v, want the origin open with 3 waiting", got)
	}
	deadline := time.After(2 * time.Second)
	for range 3 {
		select {
		case <-woken:
		case <-deadline:
			t.Fatal("waiters not woken after the interval")
		}
	}
	var probes atomic.Int32
	var probe Pass
	for range 3 {
		if p, ok := b.Allow(func() {}); ok {
			probes.Add(1)
			probe = p
		}
	}
	if probes.Load() != 1 {
		t.Fatalf("%d of three woken callers got through, want exactly one probe", probes.Load())
	}
	b.Report(probe, Success, "")
	if b.State() != Closed || len(s.NotClosed()) != 0 {
		t.Fatalf("state %v after the probe succeeded, want closed", b.State())
	}
	want := []State{Open, HalfOpen, Closed}
	if len(changes) != len(want) {
		t.Fatalf("transitions %+v, want %v", changes, want)
	}
	for i, tr := range changes {
		if tr.To != want[i] || tr.Origin != "http://h:80" || tr.Reason == "" {
			t.Errorf("transition %d = %+v, want to %v with origin and reason", i, tr, want[i])
		}
	}
}

func TestOffSetHasNoBreakers(t *testing.T) {
	s, err := NewSet(Config{})
	if err != nil || s.For("http://h:80") != nil || s.NotClosed() != nil {
		t.Fatalf("a set with Failures 0 gave breakers (err %v)", err)
	}
	if _, err := NewSet(Config{Failures: -1}); err == nil {
		t.Fatal("negative Failures accepted")
	}
}

// A probe whose attempt says nothing (a 429, an attempt cut short) hands
// the probe on: the callers held back are woken to ask again, one of
// them probes, and its success closes the breaker. Before, they waited
// for a transition nothing would bring, and the origin stayed held after
// it was back.
func TestAProbeThatSaysNothingWakesTheWaitersForTheNextProbe(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s, err := NewSet(Config{Failures: 1, Interval: time.Hour, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	b := s.For("http://h:80")
	p, _ := b.Allow(nil)
	b.Report(p, Failure, "503")
	now = now.Add(time.Hour) // the interval passed: the next caller probes
	probe, ok := b.Allow(func() { t.Error("the probe's own caller was kept as a waiter") })
	if !ok || !probe.Probe() {
		t.Fatalf("after the interval: pass %+v, %v; want the probe", probe, ok)
	}
	var woken atomic.Int32
	for range 3 {
		if _, ok := b.Allow(func() { woken.Add(1) }); ok {
			t.Fatal("a second caller got through while the probe was out")
		}
	}
	b.Report(probe, Neutral, "")
	if got := woken.Load(); got != 3 {
		t.Fatalf("%d of 3 waiters woken after the probe said nothing, want all: none would be woken again", got)
	}
	next, ok := b.Allow(nil)
	if !ok || !next.Probe() {
		t.Fatalf("a woken caller asking again: pass %+v, %v; want the next probe", next, ok)
	}
	b.Report(next, Success, "")
	if b.State() != Closed {
		t.Fatalf("state %v after the next probe succeeded, want closed", b.State())
	}
}
