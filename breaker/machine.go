package breaker

import (
	"fmt"
	"time"
)

// State is a breaker's state.
type State int

const (
	Closed State = iota
	HalfOpen
	Open
)

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case HalfOpen:
		return "half-open"
	case Open:
		return "open"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Verdict is what one attempt says of its origin.
type Verdict int

const (
	// Neutral says nothing: a 429, an attempt cut short by the caller.
	Neutral Verdict = iota
	// Success: the origin answered (2xx, or a final 4xx: it is up).
	Success
	// Failure: 5xx, 408, 425, a timeout, a connection error.
	Failure
)

// Pass lets one attempt through. Its result is reported with it, once;
// a pass of an earlier closed period or probe is ignored, so an attempt
// that was in flight when the breaker opened does not judge the probe.
type Pass struct {
	gen   uint64
	probe bool
}

// Probe reports whether the pass is the half-open breaker's probe.
func (p Pass) Probe() bool { return p.probe }

// change is a transition the machine made.
type change struct {
	from, to State
	reason   string
}

// machine is a breaker's state, without locks, timers or clock of its
// own: every method takes the time. Its invariants, which the fuzz test
// holds it to: while open no pass is given; while half-open at most one
// probe is out; gen grows at every transition, so passes of an earlier
// state are told apart.
type machine struct {
	failures int           // consecutive failures that open; >= 1
	interval time.Duration // how long it stays open

	state State
	// consecutive counts failures in a row while closed.
	consecutive int
	// until is when an open breaker becomes half-open.
	until time.Time
	// probing is set while the half-open breaker's probe is out.
	probing bool
	gen     uint64
}

// allow gives a pass, or false while open (before until) or while the
// probe is out. It moves an open breaker whose interval passed to
// half-open first, reported as ch.
func (m *machine) allow(now time.Time) (p Pass, ok bool, ch *change) {
	if m.state == Open && !now.Before(m.until) {
		ch = m.move(HalfOpen, "interval passed", now)
	}
	switch m.state {
	case Closed:
		return Pass{gen: m.gen}, true, ch
	case HalfOpen:
		if m.probing {
			return Pass{}, false, ch
		}
		m.probing = true
		return Pass{gen: m.gen, probe: true}, true, ch
	}
	return Pass{}, false, ch
}

// due moves an open breaker whose interval passed to half-open.
func (m *machine) due(now time.Time) *change {
	if m.state == Open && !now.Before(m.until) {
		return m.move(HalfOpen, "interval passed", now)
	}
	return nil
}

// report takes the verdict of p's attempt; why describes a failure.
func (m *machine) report(p Pass, v Verdict, why string, now time.Time) *change {
	if p.gen != m.gen {
		return nil
	}
	switch m.state {
	case Closed:
		switch v {
		case Success:
			m.consecutive = 0
		case Failure:
			m.consecutive++
			if m.consecutive >= m.failures {
				return m.move(Open, fmt.Sprintf("%d consecutive failures, the last: %s", m.consecutive, why), now)
			}
		}
	case HalfOpen:
		if !p.probe {
			return nil
		}
		switch v {
		case Success:
			return m.move(Closed, "probe succeeded", now)
		case Failure:
			return m.move(Open, "probe failed: "+why, now)
		default:
			// A probe that says nothing lets the next one go.
			m.probing = false
		}
	}
	return nil
}

// release ends p without a verdict (no attempt was made): a probe's turn
// goes to the next caller.
func (m *machine) release(p Pass) {
	if p.probe && p.gen == m.gen && m.state == HalfOpen {
		m.probing = false
	}
}

func (m *machine) move(to State, reason string, now time.Time) *change {
	ch := &change{from: m.state, to: to, reason: reason}
	m.state = to
	m.gen++
	m.consecutive = 0
	m.probing = false
	if to == Open {
		m.until = now.Add(m.interval)
	}
	return ch
}
