package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// sharedRun is what a scaling run (scenario.Nodes) adds to a run's
// numbers.
type sharedRun struct {
	Nodes int `json:"nodes"`
	// SettledAfter is how long after the run's first 2xx every node's key
	// hashes stopped changing (s); SettledRate the records/s from then to
	// the end of the window, SettledWindow that stretch (s).
	SettledAfter  float64 `json:"settled_after_s"`
	SettledWindow float64 `json:"settled_window_s"`
	SettledRate   float64 `json:"settled_records_per_s"`
	// KeyHashes are the key hashes each node delivered once settled (of
	// 65,536); ReadPerDelivered is every record the nodes read divided by
	// the records delivered: the read amplification of sharing.
	KeyHashes        []int64 `json:"key_hashes"`
	ReadPerDelivered float64 `json:"read_per_delivered"`
}

// minSettledWindow is the shortest settled stretch a rate is taken over;
// shorter, the run's overall rate stands in and a note says so.
const minSettledWindow = 5 * time.Second

// runScaling runs keyhook key once per node count of sc.Nodes, each on a
// topic of its own preloaded with sc.Data.Records records per node.
func (h *harness) runScaling(ctx context.Context, sc scenario) (*scenarioResult, error) {
	res := &scenarioResult{Scenario: sc, ID: sc.ID, Title: sc.Title}
	if !slices.ContainsFunc(sc.Contenders, func(c contender) bool { return c.Name == cKey.Name }) {
		return res, nil // -contenders left keyhook key out
	}
	h.logf("scenario %s: %s (%d records per node)", sc.ID, sc.Title, sc.Data.Records)
	for _, n := range sc.Nodes {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		spec := sc.Data
		spec.Records = sc.Data.Records * n
		d := newDataset(spec)
		c := cKey
		c.Name = fmt.Sprintf("%s, %d node%s", cKey.Name, n, plural(n))
		topic := fmt.Sprintf("bench-s%s-%dnodes-%d", sc.ID, n, time.Now().UnixNano())
		if err := h.kafka.createTopic(ctx, topic, sc.Partitions); err != nil {
			return nil, err
		}
		started := time.Now()
		if err := preload(ctx, h.kafka.brokers, topic, d); err != nil {
			return nil, err
		}
		res.Preload = max(res.Preload, time.Since(started).Seconds())
		r, err := h.runNodes(ctx, sc, d, topic, c, n)
		if err != nil {
			return nil, fmt.Errorf("bench: scenario %s, %s: %w", sc.ID, c.Name, err)
		}
		h.logf("  %-24s %10.0f rec/s settled (%.0f overall), settled %.1f s after the first 2xx, key hashes %v, read %.2f per delivered",
			c.Name, r.Shared.SettledRate, r.Rate, r.Shared.SettledAfter, r.Shared.KeyHashes, r.Shared.ReadPerDelivered)
		res.Runs = append(res.Runs, r)
	}
	return res, nil
}

// runNodes runs n keyhook nodes, each its own process, on one
// subscription until they delivered every record or the cap passed.
func (h *harness) runNodes(ctx context.Context, sc scenario, d *dataset, topic string, c contender, n int) (*runResult, error) {
	spec := h.childSpecFor(sc, topic, c)
	run := newSinkRun(d, sc.Sink, true)
	h.sink.begin(run)
	defer h.sink.end()
	mark, err := h.markRedis(ctx)
	if err != nil {
		return nil, err
	}
	cpuBefore := takeCPUSnapshot(h.redis.cmd.Process.Pid)

	children := make([]*child, 0, n)
	stopAll := func() ([]childReport, []error) {
		reps := make([]childReport, len(children))
		errs := make([]error, len(children))
		var wg sync.WaitGroup
		for i, ch := range children {
			wg.Go(func() { reps[i], errs[i] = ch.stop(30 * time.Second) })
		}
		wg.Wait()
		return reps, errs
	}
	for i := range n {
		s := spec
		s.NodeID = fmt.Sprintf("bench-%s-node%d", spec.Group, i)
		ch, err := startChild(s, h.logw)
		if err != nil {
			stopAll()
			return nil, err
		}
		children = append(children, ch)
	}
	outcome := h.awaitNodes(ctx, children, run, d, sc.Cap)
	stoppedAt := time.Now().UnixNano()
	reps, errs := stopAll()
	cpuAfter := takeCPUSnapshot(h.redis.cmd.Process.Pid)

	r := &runResult{Contender: c, Outcome: outcome, Records: d.spec.Records}
	if err := h.countRedis(ctx, mark, r); err != nil {
		return nil, err
	}
	for i, err := range errs {
		if err != nil {
			r.Notes = append(r.Notes, fmt.Sprintf("node %d: %v", i, err))
		}
	}
	if outcome == outcomeFailed {
		r.Notes = append(r.Notes, "failed: nothing was delivered, or a node ended early (see children.log)")
	}
	// The nodes' own numbers are summed or maxed by measureNodes; measure
	// takes the sink's.
	r.measure(run, d, sc, childReport{}, nil, sc.Cap)
	r.measureNodes(run, reps, stoppedAt, n)
	r.OthersCPU = othersShare(cpuBefore, cpuAfter)
	return r, nil
}

// awaitNodes waits until every record was delivered, the cap passed since
// the first 2xx, or nothing was delivered for 90 s.
func (h *harness) awaitNodes(ctx context.Context, children []*child, run *sinkRun, d *dataset, limit time.Duration) string {
	const firstTimeout = 90 * time.Second
	started := time.Now()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	var first time.Time
	for {
		select {
		case <-ctx.Done():
			return outcomeFailed
		case <-t.C:
		}
		for _, ch := range children {
			select {
			case <-ch.exited:
				if run.delivered.Load() >= int64(d.spec.Records) {
					return outcomeComplete
				}
				return outcomeFailed
			default:
			}
		}
		delivered := run.delivered.Load()
		if first.IsZero() && delivered > 0 {
			first = time.Now()
		}
		switch {
		case delivered >= int64(d.spec.Records):
			return outcomeComplete
		case first.IsZero() && time.Since(started) > firstTimeout:
			return outcomeFailed
		case !first.IsZero() && time.Since(first) >= limit:
			return outcomeCapped
		}
	}
}

// measureNodes adds the nodes' own numbers to a scaling run: CPU per
// record summed over the nodes, peaks, and the settled rate.
func (r *runResult) measureNodes(run *sinkRun, reps []childReport, stoppedAt int64, n int) {
	sh := &sharedRun{Nodes: n, SettledAfter: notMeasured, SettledWindow: notMeasured, SettledRate: notMeasured, ReadPerDelivered: notMeasured}
	r.Shared = sh
	start, end := r.windowBounds(run)
	var cpu, read int64
	samples := make([][]sample, len(reps))
	for i, rep := range reps {
		r.PeakRSSMB = max(r.PeakRSSMB, float64(rep.VmHWMKB)/1024)
		// Samples after the stop began show the nodes letting go.
		for _, s := range rep.Samples {
			if s.T < stoppedAt {
				samples[i] = append(samples[i], s)
			}
		}
		if len(rep.Samples) > 1 && end > start {
			cpu += cpuAt(rep.Samples, end) - cpuAt(rep.Samples, start)
		}
		// Counters only grow; the last sample, taken after the node
		// stopped, reads no gauges.
		var notOwned int64
		for _, s := range rep.Samples {
			r.AttemptErrors = max(r.AttemptErrors, s.AttemptErrors)
			r.MaxWindow = max(r.MaxWindow, s.MaxDistance)
			r.PeakPending = max(r.PeakPending, s.Pending)
			notOwned = max(notOwned, s.NotOwned)
		}
		read += notOwned
	}
	if r.InWindow > 0 && end > start {
		r.CPUPerRecordUS = float64(cpu) / 1e3 / float64(r.InWindow)
	}
	if r.Delivered > 0 {
		// Each node reads every record: the ones it delivers and the ones
		// it leaves to the others.
		sh.ReadPerDelivered = float64(r.Delivered+read) / float64(r.Delivered)
	}
	settled, hashes := settledAt(samples)
	sh.KeyHashes = hashes
	if settled == 0 || end <= start {
		r.Notes = append(r.Notes, "the nodes' key hashes never settled: no settled rate")
		return
	}
	from := max(settled, start)
	sh.SettledAfter = float64(from-start) / 1e9
	if time.Duration(end-from) < minSettledWindow {
		r.Notes = append(r.Notes, fmt.Sprintf("settled only %.1f s before the end: the settled rate is the overall one", float64(end-from)/1e9))
		sh.SettledWindow, sh.SettledRate = r.Window, r.Rate
		return
	}
	var in int64
	for i := range run.firstOK {
		if t := run.firstOK[i].Load(); t > from && t <= end {
			in++
		}
	}
	sh.SettledWindow = float64(end-from) / 1e9
	sh.SettledRate = float64(in) / sh.SettledWindow
}

// windowBounds is the measured window of the run (see window) in unix ns.
func (r *runResult) windowBounds(run *sinkRun) (start, end int64) {
	start = int64(math.MaxInt64)
	for i := range run.firstOK {
		if t := run.firstOK[i].Load(); t > 0 {
			start = min(start, t)
		}
	}
	if start == math.MaxInt64 {
		return 0, 0
	}
	return start, start + int64(r.Window*1e9)
}

// settledAt returns when every node's key hashes took their final value
// for good, provided the final values cover the whole space once (0 when
// they never did), and those values per node.
func settledAt(samples [][]sample) (int64, []int64) {
	var at, sum int64
	hashes := make([]int64, len(samples))
	for i, ss := range samples {
		if len(ss) == 0 {
			return 0, hashes
		}
		final := ss[len(ss)-1].KeyHashes
		hashes[i] = final
		sum += final
		since := ss[len(ss)-1].T
		for j := len(ss) - 1; j >= 0 && ss[j].KeyHashes == final; j-- {
			since = ss[j].T
		}
		at = max(at, since)
	}
	if sum != 1<<16 {
		return 0, hashes
	}
	return at, hashes
}

// linearGoal is the share of linear scaling a scaling scenario aims at:
// n nodes deliver at least linearGoal × n × what one node delivers.
const linearGoal = 0.85

// scaling returns, for a scaling scenario's runs, each run's settled rate
// over n times the one-node run's (0 without a one-node run).
func scaling(s *scenarioResult) map[*runResult]float64 {
	var one float64
	for _, r := range s.Runs {
		if r.Shared != nil && r.Shared.Nodes == 1 {
			one = r.Shared.SettledRate
		}
	}
	out := make(map[*runResult]float64)
	for _, r := range s.Runs {
		if r.Shared != nil && one > 0 && r.Shared.SettledRate > 0 {
			out[r] = r.Shared.SettledRate / (float64(r.Shared.Nodes) * one)
		}
	}
	return out
}

// evaluateScaling checks a scaling scenario's goal at its largest node
// count, and per-key order and duplicates at every count.
func (r *results) evaluateScaling(s *scenarioResult) {
	if len(s.Runs) == 0 {
		return
	}
	lin := scaling(s)
	last := s.Runs[len(s.Runs)-1]
	n := last.Shared.Nodes
	goal := fmt.Sprintf("%d nodes ≥ %.2f× linear (≥ %.1f× one node)", n, linearGoal, linearGoal*float64(n))
	if x, ok := lin[last]; !ok {
		r.missing(s.ID, goal, "no settled rate at one node or at "+fmt.Sprint(n))
	} else {
		r.add(s.ID, goal, x >= linearGoal, "%.2f× linear: %.0f rec/s, %.2f× one node's %.0f%s",
			x, last.Shared.SettledRate, x*float64(n), last.Shared.SettledRate/(x*float64(n)), noisy(s.Runs...))
	}
	var overlaps, reorders, dups int64
	for _, run := range s.Runs {
		overlaps, reorders, dups = overlaps+run.Overlaps, reorders+run.Reorders, dups+run.Duplicates
	}
	r.add(s.ID, "key order holds across sharers, no duplicate", overlaps == 0 && reorders == 0 && dups == 0,
		"%d overlapping requests, %d out of order, %d duplicates over the %d runs", overlaps, reorders, dups, len(s.Runs))
}

// scalingMarkdown is a scaling scenario's own table.
func scalingMarkdown(b *strings.Builder, s *scenarioResult) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	lin := scaling(s)
	id := ideal(s.Scenario)
	w("\n| nodes | settled records/s | × one node | × linear | ×ideal (n × in-flight÷latency) | settled after s | settled window s | key hashes per node | records read per delivered | CPU µs/rec (all nodes) | order: overlaps / reorders | duplicates |\n")
	w("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range s.Runs {
		sh := r.Shared
		if sh == nil {
			continue
		}
		x, one := "–", "–"
		if v, ok := lin[r]; ok {
			x, one = fmt.Sprintf("%.2f", v), fmt.Sprintf("%.2f", v*float64(sh.Nodes))
		}
		xi := "–"
		if id > 0 && sh.SettledRate > 0 {
			xi = fmt.Sprintf("%.2f", sh.SettledRate/(id*float64(sh.Nodes)))
		}
		w("| %d | %s | %s | %s | %s | %s | %s | %v | %s | %s | %s | %d |\n", sh.Nodes, num(sh.SettledRate, 0), one, x, xi,
			num(sh.SettledAfter, 1), num(sh.SettledWindow, 1), sh.KeyHashes, num(sh.ReadPerDelivered, 2), num(r.CPUPerRecordUS, 1), orderCell(r), r.Duplicates)
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
