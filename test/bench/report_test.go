package main

import (
	"fmt"
	"image/color"
	"strings"
	"testing"
	"time"
)

// Scenario 3's Redis targets: ≤ 0.05 judges every call Redis ran (INFO
// commandstats, the calls inside scripts included), the ≤ 0.01 stretch
// what keyhook sent (keyhook_redis_commands_total), and its measured
// text quotes both.
func TestScenarioThreeJudgesTheStretchOnTheCommandsSent(t *testing.T) {
	for _, tt := range []struct {
		name             string
		cmds, sent       float64
		wantBase, wantSt string
		wantText         string
	}{
		{"one call per round", 0.019, 0.0026, statusPass, statusPass, "0.0026 sent; 0.0190 counting the calls inside scripts"},
		{"a call per partition", 0.0365, 0.0122, statusPass, statusMiss, "0.0122 sent; 0.0365 counting the calls inside scripts"},
		{"over both", 0.06, 0.02, statusMiss, statusMiss, "0.0200 sent; 0.0600 counting the calls inside scripts"},
		{"counter not read", 0.019, notMeasured, statusPass, statusNA, "keyhook_redis_commands_total not read"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			kh := &runResult{Contender: cKey, CmdsPerRecord: tt.cmds, SentPerRecord: tt.sent, RedisCommands: 1900, RedisScripts: 260,
				CPUPerRecordUS: notMeasured, HeapPerHeld: notMeasured, E2EP50: notMeasured, E2EP99: notMeasured}
			r := &results{Scenarios: []*scenarioResult{{ID: "3", Runs: []*runResult{kh}}}}
			r.evaluate()
			got := map[string]target{}
			for _, tg := range r.Targets {
				if tg.Scenario == "3" {
					got[tg.Goal] = tg
				}
			}
			if base := got["Redis commands/record ≤ 0.05"]; base.Status != tt.wantBase || !strings.HasPrefix(base.Measured, fmt.Sprintf("%.4f ", tt.cmds)) {
				t.Errorf("≤ 0.05 target = %+v; want %s on commandstats (%v)", base, tt.wantBase, tt.cmds)
			}
			if st := got["Redis commands/record ≤ 0.01 (stretch)"]; st.Status != tt.wantSt || st.Measured != tt.wantText {
				t.Errorf("stretch target = %+v; want %s, measured %q", st, tt.wantSt, tt.wantText)
			}
			md := r.markdown()
			for _, want := range []string{"| Redis cmds/rec | Redis sent/rec |", "**Redis sent/rec**", "keyhook_redis_commands_total"} {
				if !strings.Contains(md, want) {
					t.Errorf("results.md lacks %q", want)
				}
			}
		})
	}
}

// Scenario 1 judges keyhook against the Parallel Consumer at the same
// max_in_flight when it ran, and says why not when it was skipped.
func TestScenarioOneJudgesKeyhookAgainstTheParallelConsumer(t *testing.T) {
	const goal = goalParallel
	for _, tt := range []struct {
		name   string
		pc     *runResult
		status string
		text   string
	}{
		{"three times", &runResult{Contender: cParallel, Rate: 5000, CPUPerRecordUS: 300}, statusPass, "3.05× (15250 vs 5000 rec/s; CPU per record 56.0 vs 300.0 µs)"},
		{"short of it", &runResult{Contender: cParallel, Rate: 6220, CPUPerRecordUS: 268}, statusMiss, "2.45× (15250 vs 6220 rec/s; CPU per record 56.0 vs 268.0 µs)"},
		{"skipped", &runResult{Contender: cParallel, Outcome: outcomeSkipped, Notes: []string{"skipped: java not found"}}, statusNA, "skipped: java not found"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			kh := &runResult{Contender: cKey, Rate: 15250, CPUPerRecordUS: 56}
			r := &results{Scenarios: []*scenarioResult{{ID: "1", Runs: []*runResult{kh, tt.pc}}}}
			r.evaluate()
			for _, tg := range r.Targets {
				if tg.Goal == goal {
					if tg.Status != tt.status || tg.Measured != tt.text {
						t.Errorf("target = %+v; want %s, %q", tg, tt.status, tt.text)
					}
					return
				}
			}
			t.Errorf("no %q target in %+v", goal, r.Targets)
		})
	}
}

// A contender without a colour of its own is drawn white on white: its
// bar and legend swatch vanish from the chart.
func TestEveryContenderHasAColourOfItsOwn(t *testing.T) {
	seen := make(map[color.RGBA]string)
	for _, c := range allContenders {
		col, ok := contenderColors[c.Name]
		if !ok {
			t.Errorf("contender %q has no colour in the chart", c.Name)
			continue
		}
		if other, dup := seen[col]; dup {
			t.Errorf("contenders %q and %q share the colour %v", c.Name, other, col)
		}
		seen[col] = c.Name
	}
}

// The rate, CPU and latency targets are judged against the ceilings
// measured in the same run: the figures of the run of 2026-12-02 05:12
// pass them, and a keyhook falling short of its own client does not.
func TestTargetsAreJudgedAgainstTheCeilingsOfTheSameRun(t *testing.T) {
	status := func(r *results, goal string) string {
		t.Helper()
		for _, tg := range r.Targets {
			if tg.Goal == goal {
				return tg.Status
			}
		}
		t.Fatalf("no %q target in %+v", goal, r.Targets)
		return ""
	}
	run := func(khRate, khCPU float64, p99 float64) *results {
		s1 := &scenarioResult{ID: "1", Scenario: scenario{MaxInFlight: 1000, Sink: sinkSpec{Latency: latencySpec{Dist: distFixed, Center: 50 * time.Millisecond}}}, Runs: []*runResult{
			{Contender: cKey, Rate: 17276, CPUPerRecordUS: 47.4},
			{Contender: cCeilingA, Rate: 18146, CPUPerRecordUS: 34.4},
			{Contender: cParallel, Rate: 6405, CPUPerRecordUS: 258.5},
		}}
		s3 := &scenarioResult{ID: "3", Runs: []*runResult{
			{Contender: cKey, Rate: khRate, CPUPerRecordUS: khCPU, CmdsPerRecord: 0.02, SentPerRecord: 0.002, HeapPerHeld: 409},
			{Contender: cCeilingA, Rate: 29592, CPUPerRecordUS: 32.1},
		}}
		r := &results{Scenarios: []*scenarioResult{s1, s3}, Paced: &pacedResult{P99: p99, KafkaP99: 61.8, ServiceP99: 69.0, EndpointP99: 50}}
		r.evaluate()
		return r
	}
	r := run(28929, 37.0, 143.6)
	for _, goal := range []string{goalCeilingA, goalParallel, goalCPU, goalP99} {
		if got := status(r, goal); got != statusPass {
			t.Errorf("%s: %s with the figures of the 05:12 run; want %s", goal, got, statusPass)
		}
	}
	r = run(28929, 42.2, 151.0)
	for _, goal := range []string{goalCPU, goalP99} {
		if got := status(r, goal); got != statusMiss {
			t.Errorf("%s: %s 10.1 µs over ceiling A / 0.2 ms over the limit; want %s", goal, got, statusMiss)
		}
	}
}
