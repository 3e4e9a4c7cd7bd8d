package breaker

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func newMachine(failures int, interval time.Duration) *machine {
	return &machine{failures: failures, interval: interval}
}

func mustAllow(t *testing.T, m *machine, now time.Time) Pass {
	t.Helper()
	p, ok, _ := m.allow(now)
	if !ok {
		t.Fatalf("allow at %v refused in state %v", now.Sub(t0), m.state)
	}
	return p
}

func TestClosedOpensAfterConsecutiveFailuresOnly(t *testing.T) {
	m := newMachine(3, time.Second)
	for i, v := range []Verdict{Failure, Failure, Success, Neutral, Failure, Failure} {
		if ch := m.report(mustAllow(t, m, t0), v, "503", t0); ch != nil {
			t.Fatalf("verdict %d (%v) moved the breaker to %v; a success in between resets the count", i, v, ch.to)
		}
	}
	ch := m.report(mustAllow(t, m, t0), Failure, "503", t0)
	if ch == nil || ch.to != Open || ch.reason != "3 consecutive failures, the last: 503" {
		t.Fatalf("third failure in a row: change %+v, want open with the count and the last failure", ch)
	}
	if _, ok, _ := m.allow(t0.Add(time.Second - 1)); ok {
		t.Fatal("an open breaker let an attempt through before its interval ended")
	}
}

func TestHalfOpenLetsOneProbeThroughAndItsVerdictDecides(t *testing.T) {
	m := newMachine(1, time.Second)
	m.report(mustAllow(t, m, t0), Failure, "connection refused", t0)
	at := t0.Add(time.Second)
	probe, ok, ch := m.allow(at)
	if !ok || !probe.Probe() || ch == nil || ch.to != HalfOpen {
		t.Fatalf("after the interval: pass %+v ok %v change %+v, want the probe and a half-open change", probe, ok, ch)
	}
	if _, ok, _ := m.allow(at); ok {
		t.Fatal("a second attempt got through while the probe is out")
	}
	if ch := m.report(probe, Failure, "503", at); ch == nil || ch.to != Open || ch.reason != "probe failed: 503" {
		t.Fatalf("failed probe: change %+v, want open again", ch)
	}
	if _, ok, _ := m.allow(at.Add(time.Second - 1)); ok {
		t.Fatal("a failed probe did not open the breaker for a whole interval")
	}
	probe = mustAllow(t, m, at.Add(time.Second))
	if ch := m.report(probe, Success, "", at.Add(time.Second)); ch == nil || ch.to != Closed {
		t.Fatalf("probe succeeded: change %+v, want closed", ch)
	}
	for range 5 {
		mustAllow(t, m, at.Add(time.Second))
	}
}

func TestStaleVerdictsAndUnusedProbes(t *testing.T) {
	m := newMachine(2, time.Second)
	old := mustAllow(t, m, t0) // in flight when the breaker opens
	m.report(mustAllow(t, m, t0), Failure, "503", t0)
	m.report(mustAllow(t, m, t0), Failure, "503", t0)
	probe := mustAllow(t, m, t0.Add(time.Second))
	if ch := m.report(old, Success, "", t0.Add(time.Second)); ch != nil || m.state != HalfOpen {
		t.Fatalf("an attempt from before the breaker opened closed it: %+v, state %v", ch, m.state)
	}
	m.release(probe)
	next := mustAllow(t, m, t0.Add(time.Second))
	if !next.Probe() {
		t.Fatal("the probe's turn did not pass on once the probe was released unused")
	}
	m.report(next, Neutral, "", t0.Add(time.Second))
	if !mustAllow(t, m, t0.Add(time.Second)).Probe() {
		t.Fatal("a neutral probe (429) did not let the next probe go")
	}
}

// FuzzMachineNeverLetsThroughWhileOpenAndOneProbeAtATime drives the
// machine with any sequence of allows, reports and releases over time,
// checking its promises after every step.
func FuzzMachineNeverLetsThroughWhileOpenAndOneProbeAtATime(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 2, 0, 3, 0, 1, 4, 0})
	f.Add([]byte{0, 1, 0, 1, 0, 1, 3, 3, 0, 0, 2, 5, 0, 4})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const interval = 10 * time.Second
		m := newMachine(3, interval)
		now := t0
		var out []Pass // passes given and not yet reported
		for _, op := range ops {
			wasGen := m.gen
			switch op % 6 {
			case 0, 5:
				before := m.state
				p, ok, _ := m.allow(now)
				if ok && before == Open && now.Before(m.until) {
					t.Fatalf("a pass while open, %v before the interval ends", m.until.Sub(now))
				}
				if ok {
					out = append(out, p)
				}
			case 1, 2, 3:
				if len(out) == 0 {
					continue
				}
				p := out[0]
				out = out[1:]
				ch := m.report(p, Verdict(op%6-1), "x", now)
				if p.gen != wasGen && ch != nil {
					t.Fatalf("a stale pass moved the breaker: %+v", ch)
				}
			case 4:
				if len(out) > 0 {
					m.release(out[len(out)-1])
					out = out[:len(out)-1]
				}
				now = now.Add(time.Duration(op) * time.Second)
			}
			if m.state == HalfOpen {
				live := 0
				for _, p := range out {
					if p.probe && p.gen == m.gen {
						live++
					}
				}
				if live > 1 || (live == 1) != m.probing {
					t.Fatalf("half-open with %d live probes out, probing %v", live, m.probing)
				}
			}
			if m.state != HalfOpen && m.probing {
				t.Fatalf("probing while %v", m.state)
			}
		}
	})
}
