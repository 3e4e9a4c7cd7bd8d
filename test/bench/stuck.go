package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// stuckSpec is scenario 7's shape, from the -stuck-* flags: records are
// produced at Rate for a while; run a has no special key (the no-failure
// rate), run b one key failing for Fail then recovering while production
// goes on for After, run c one slow key for Slow.
type stuckSpec struct {
	Rate      float64       `json:"offered_records_per_s"`
	Baseline  time.Duration `json:"baseline"`
	Fail      time.Duration `json:"fail"`
	After     time.Duration `json:"after_recovery"`
	FailShare float64       `json:"fail_share"`
	FailDrain time.Duration `json:"fail_drain"`
	Slow      time.Duration `json:"slow"`
	SlowShare float64       `json:"slow_share"`
	SlowDrain time.Duration `json:"slow_drain"`
}

// defaultStuck is the run: 5,000 rec/s, 10 minutes of failure.
var defaultStuck = stuckSpec{
	Rate: 5000, Baseline: 2 * time.Minute,
	Fail: 10 * time.Minute, After: time.Minute, FailShare: 0.002, FailDrain: 10 * time.Minute,
	Slow: 5 * time.Minute, SlowShare: 0.01, SlowDrain: time.Minute,
}

func (s stuckSpec) validate() error {
	switch {
	case s.Rate <= 0:
		return fmt.Errorf("bench: -stuck-rate must be positive")
	case s.Baseline < 0 || s.Fail < 0 || s.Slow < 0 || s.After < 0 || s.FailDrain < 0 || s.SlowDrain < 0:
		return fmt.Errorf("bench: -stuck-* durations must not be negative")
	case s.FailShare <= 0 || s.FailShare >= 1:
		return fmt.Errorf("bench: -stuck-share must be in (0, 1)")
	case s.SlowShare <= 0 || s.SlowShare >= 1:
		return fmt.Errorf("bench: -stuck-slow-share must be in (0, 1)")
	}
	return nil
}

// stuckWidth is the width of the windows a stuck run is reported in.
const stuckWidth = 10 * time.Second

// Goals of scenario 7.
const (
	stuckRatioGoal = 0.95 // other keys' rate over the no-failure rate
	stuckGapGoal   = 64   // Redis bytes per gap
	stuckRSSGoal   = 1.15 // RSS at the end of production over its start
)

// Kinds of stuck run.
const (
	stuckNone    = "no failure"
	stuckFailing = "one key failing"
	stuckSlow    = "one key slow"
)

// stuckResult is scenario 7's three runs.
type stuckResult struct {
	Spec stuckSpec   `json:"spec"`
	Runs []*stuckRun `json:"runs"`
	// BaselineRate is run a's mean rate of delivered records per second
	// over its production windows; 0 when run a did not run.
	BaselineRate float64 `json:"baseline_records_per_s"`
}

// stuckRun is one run of scenario 7.
type stuckRun struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"`
	Outcome string `json:"outcome"`
	// Produce is how long records were produced (s); Produced and
	// Achieved how many and at what rate; Recovery, for a failing key,
	// when it recovered (s after production began).
	Produce  float64 `json:"produce_s"`
	Produced int     `json:"produced"`
	Achieved float64 `json:"produced_records_per_s"`
	Recovery float64 `json:"recovery_s,omitempty"`
	// Elapsed is the run's length, production and drain (s).
	Elapsed float64 `json:"elapsed_s"`
	// OthersShare is the share of the produced records that belong to
	// ordinary keys: the expected rate of a run is the baseline's rate
	// scaled by it.
	OthersShare float64       `json:"others_share"`
	Expected    float64       `json:"expected_others_records_per_s"`
	Windows     []stuckWindow `json:"windows"`
	// MeanRate is the mean of the other keys' rate over the production
	// windows; MinRatio the lowest of their ratios (notMeasured without
	// a baseline), at MinRatioAt (s).
	MeanRate   float64 `json:"mean_others_records_per_s"`
	MinRatio   float64 `json:"min_ratio"`
	MinRatioAt float64 `json:"min_ratio_at_s"`
	// RSS of the node over the run (MiB), and the last window's while
	// the key was stuck over the warm-up's (rssGrowth).
	RSSMinMB  float64 `json:"rss_min_mib"`
	RSSMaxMB  float64 `json:"rss_max_mib"`
	RSSGrowth float64 `json:"rss_growth"`
	// ParkedMax and Reread: the node's keyhook.records.parked (most at
	// once) and keyhook.records.reread (total); notMeasured when the node
	// does not publish them.
	ParkedMax int64 `json:"parked_max"`
	Reread    int64 `json:"reread"`
	// Tracking: the most gaps (acked ranges) of the partition at once,
	// the Redis bytes of its tracking hash then, and those per gap.
	MaxGaps     int64   `json:"max_gaps"`
	GapBytes    int64   `json:"bytes_at_max_gaps"`
	BytesPerGap float64 `json:"bytes_per_gap"`
	// MarginalPerGap leaves the hash's fixed cost out: the bytes between
	// the samples with the fewest and the most gaps over their gaps.
	MarginalPerGap float64 `json:"marginal_bytes_per_gap"`
	// The special key's records, delivered, and the time from its
	// recovery to its last record delivered (s, notMeasured when not all
	// were delivered or it never recovered).
	SpecialTotal  int64   `json:"special_total"`
	SpecialDone   int64   `json:"special_delivered"`
	RecoveredLast float64 `json:"recovery_to_last_s"`
	// OthersTotal and OthersDone count the ordinary keys' records.
	OthersTotal int64 `json:"others_total"`
	OthersDone  int64 `json:"others_delivered"`
	// Order over every key, and redeliveries.
	Overlaps   int64    `json:"overlaps"`
	Reorders   int64    `json:"reorders"`
	Duplicates int64    `json:"duplicates"`
	Errors     int64    `json:"errors_503"`
	OthersCPU  float64  `json:"others_cpu_share"`
	Notes      []string `json:"notes,omitempty"`
}

// stuckWindow is one 10 s window of a stuck run, from the start of
// production.
type stuckWindow struct {
	Start float64 `json:"start_s"`
	// Producing is set for windows that lie wholly within production:
	// only they have a ratio.
	Producing  bool    `json:"producing"`
	OthersRate float64 `json:"others_records_per_s"`
	Ratio      float64 `json:"ratio"`
	// SpecialDone counts the special key's records delivered in it.
	SpecialDone int64   `json:"special_delivered"`
	RSSMB       float64 `json:"rss_mib"`
	Parked      int64   `json:"parked"`
	// Reread is the node's records read again so far, at the window's
	// end: its growth is the re-read load.
	Reread     int64 `json:"reread"`
	Gaps       int64 `json:"gaps"`
	RedisBytes int64 `json:"redis_bytes"`
}

// runStuck runs scenario 7: runs a, b and c one after the other, each on
// a topic of its own with a keyhook key node as a child process.
func (h *harness) runStuck(ctx context.Context, sc scenario) (*scenarioResult, error) {
	sp := *sc.Stuck
	res := &scenarioResult{Scenario: sc, ID: sc.ID, Title: sc.Title, Stuck: &stuckResult{Spec: sp}}
	if !slices.ContainsFunc(sc.Contenders, func(c contender) bool { return c.Name == cKey.Name }) {
		return res, nil // -contenders left keyhook key out
	}
	h.logf("scenario %s: %s", sc.ID, sc.Title)
	type plan struct {
		name, kind     string
		produce, drain time.Duration
		special        string
		share          float64
	}
	plans := []plan{
		{"a. no failure", stuckNone, sp.Baseline, time.Minute, specialNone, 0},
		{"b. one key failing", stuckFailing, sp.Fail + sp.After, sp.FailDrain, specialFailing, sp.FailShare},
		{"c. one key slow", stuckSlow, sp.Slow, sp.SlowDrain, specialSlow, sp.SlowShare},
	}
	for _, p := range plans {
		if p.produce <= 0 {
			continue
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		spec := sc.Data
		spec.Records = max(1, int(sp.Rate*p.produce.Seconds()))
		spec.Special, spec.SpecialShare = p.special, p.share
		sink := sc.Sink
		if p.kind == stuckSlow {
			sink.SlowLatency = time.Second
		}
		r, err := h.stuckRun(ctx, sc, spec, sink, p.name, p.kind, p.produce, p.drain)
		if err != nil {
			return nil, fmt.Errorf("bench: scenario %s, %s: %w", sc.ID, p.name, err)
		}
		res.Stuck.Runs = append(res.Stuck.Runs, r)
		if p.kind == stuckNone {
			res.Stuck.BaselineRate = r.MeanRate
		}
	}
	// The ratios need run a's rate, known only once it ran.
	for _, r := range res.Stuck.Runs {
		r.rate(res.Stuck.BaselineRate, sp.Rate)
		h.logf("  %-20s %s", r.Name, r.summary())
	}
	return res, nil
}

// stuckRun produces spec's records at the scenario's rate for produce
// while a keyhook key node delivers them, then waits up to drain for the
// rest, sampling the node's RSS and the partition's tracking state.
func (h *harness) stuckRun(ctx context.Context, sc scenario, spec dataSpec, sinkSpec sinkSpec, name, kind string, produce, drain time.Duration) (*stuckRun, error) {
	rate := sc.Stuck.Rate
	h.logf("  %s: %d records at %.0f rec/s for %v, then up to %v to deliver the rest", name, spec.Records, rate, produce, drain)
	d := newDataset(spec)
	topic := fmt.Sprintf("bench-s%s-%s-%d", sc.ID, slug(kind), time.Now().UnixNano())
	if err := h.kafka.createTopic(ctx, topic, sc.Partitions); err != nil {
		return nil, err
	}
	// kfake keeps every record in this process: let a run's go.
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = h.kafka.adm.DeleteTopics(dctx, topic)
	}()
	run := newSinkRun(d, sinkSpec, true)
	// The failing key fails from the first record on: set before
	// production, moved to the real start below.
	run.failUntil.Store(time.Now().Add(24 * time.Hour).UnixNano())
	h.sink.begin(run)
	defer h.sink.end()

	c := cKey
	c.Name = "keyhook key, " + kind
	cspec := h.childSpecFor(sc, topic, c)
	// A sample a second is plenty over minutes, and costs the node less.
	cspec.SampleEvery = time.Second
	ts := startTrackSampler(ctx, h, cspec.Group, topic, sc.Partitions)
	cpuBefore := takeCPUSnapshot(h.redis.cmd.Process.Pid)
	ch, err := startChild(cspec, h.logw)
	if err != nil {
		ts.stop()
		return nil, err
	}
	select {
	case <-ch.ready:
	case <-ch.exited:
	case <-time.After(60 * time.Second):
	}
	if !isClosed(ch.ready) {
		_, _ = ch.stop(30 * time.Second)
		ts.stop()
		return nil, fmt.Errorf("bench: keyhook did not own the partition within 60 s (see children.log)")
	}
	// From the node's start to the moment it is asked to stop: neither
	// the runtime's first pages nor the exit are the node at work.
	rss := startRSSSampler(ch.cmd.Process.Pid, time.Second)
	var (
		rep      childReport
		stopErr  error
		tsamples []trackSample
		rsamples []point
	)
	stop := func() {
		rsamples = rss.stop()
		rep, stopErr = ch.stop(30 * time.Second)
		tsamples = ts.stop()
	}
	time.Sleep(500 * time.Millisecond) // let the claim land before the clock starts

	p, err := newProducer(h.kafka.brokers, topic, d, time.Millisecond)
	if err != nil {
		stop()
		return nil, err
	}
	started := time.Now()
	if kind == stuckFailing {
		run.failUntil.Store(started.Add(sc.Stuck.Fail).UnixNano())
	}
	n := spec.Records
	tk := time.NewTicker(2 * time.Millisecond)
	sent := 0
	for sent < n && ctx.Err() == nil {
		<-tk.C
		due := min(n, int(time.Since(started).Seconds()*rate))
		for ; sent < due; sent++ {
			p.produce(ctx, sent)
		}
	}
	tk.Stop()
	produced := time.Now()
	if err := p.finish(ctx); err != nil {
		stop()
		return nil, err
	}
	outcome := outcomeCapped
	for deadline := produced.Add(drain); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(100 * time.Millisecond) {
		if run.delivered.Load() >= int64(n) {
			outcome = outcomeComplete
			break
		}
		if isClosed(ch.exited) {
			outcome = outcomeFailed
			break
		}
	}
	ended := time.Now()
	stop()

	r := &stuckRun{
		Name: name, Kind: kind, Outcome: outcome,
		Produce: produced.Sub(started).Seconds(), Produced: n, Elapsed: ended.Sub(started).Seconds(),
		OthersCPU: othersShare(cpuBefore, takeCPUSnapshot(h.redis.cmd.Process.Pid)),
	}
	r.Achieved = float64(n) / r.Produce
	if kind == stuckFailing {
		r.Recovery = sc.Stuck.Fail.Seconds()
	}
	if stopErr != nil {
		r.Notes = append(r.Notes, "child: "+stopErr.Error())
	}
	r.measure(run, d, rep.Samples, tsamples, rsamples, started.UnixNano(), produced.UnixNano(), ended.UnixNano())
	return r, nil
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// point is one reading of a series: when (unix ns) and its value.
type point struct {
	T int64 `json:"t"`
	V int64 `json:"v"`
}

// measure turns the sink's records, the node's samples, the tracking
// samples and the RSS readings into the run's windows and numbers;
// start, produced and ended are the unix ns production began and ended
// and the run ended.
func (r *stuckRun) measure(run *sinkRun, d *dataset, ns []sample, ts []trackSample, rss []point, start, produced, ended int64) {
	r.SpecialTotal = int64(d.specialRecords())
	r.OthersTotal = int64(d.spec.Records) - r.SpecialTotal
	r.OthersShare = float64(r.OthersTotal) / float64(d.spec.Records)
	r.Overlaps, r.Reorders, r.Duplicates = run.overlaps.Load(), run.reorders.Load(), run.duplicates()
	r.Errors = run.errors.Load()
	r.RecoveredLast = notMeasured

	var others, special []int64
	var lastSpecial int64
	for i := range run.firstOK {
		t := run.firstOK[i].Load()
		if t == 0 {
			continue
		}
		if d.spec.Special != specialNone && d.key[i] == 0 {
			special = append(special, t)
			lastSpecial = max(lastSpecial, t)
			continue
		}
		others = append(others, t)
	}
	r.OthersDone, r.SpecialDone = int64(len(others)), int64(len(special))
	if r.Recovery > 0 && r.SpecialTotal > 0 && r.SpecialDone == r.SpecialTotal {
		r.RecoveredLast = max(0, float64(lastSpecial-start)/1e9-r.Recovery)
	}

	// Whole windows only: a last partial one would read as a drop.
	width := int64(stuckWidth)
	nw := int((ended - start) / width)
	rates := rateWindows(others, start, stuckWidth, nw)
	specials := countWindows(special, start, stuckWidth, nw)
	var parked, reread, gaps, bytes []point
	r.ParkedMax, r.Reread = notMeasured, notMeasured
	for _, s := range ns {
		if s.ParkedSeen {
			parked = append(parked, point{s.T, s.Parked})
			r.ParkedMax = max(r.ParkedMax, s.Parked)
			// The counter appears with its first re-read; a node that
			// parks and never re-read has read nothing again.
			r.Reread = max(r.Reread, 0)
		}
		if s.RereadSeen {
			r.Reread = max(r.Reread, s.Reread)
		}
		if s.ParkedSeen || s.RereadSeen {
			reread = append(reread, point{s.T, s.Reread})
		}
	}
	for _, s := range ts {
		gaps = append(gaps, point{s.T, s.Gaps})
		bytes = append(bytes, point{s.T, s.Bytes})
	}
	rssW := windowMax(rss, start, stuckWidth, nw)
	parkedW := windowMax(parked, start, stuckWidth, nw)
	rereadW := windowMax(reread, start, stuckWidth, nw)
	gapsW := windowMax(gaps, start, stuckWidth, nw)
	bytesW := windowMax(bytes, start, stuckWidth, nw)
	for i := range nw {
		w := stuckWindow{
			Start:      float64(i) * stuckWidth.Seconds(),
			Producing:  start+int64(i+1)*width <= produced,
			OthersRate: rates[i], Ratio: notMeasured, SpecialDone: specials[i],
			RSSMB: notMeasured, Parked: parkedW[i], Reread: rereadW[i], Gaps: gapsW[i], RedisBytes: bytesW[i],
		}
		if rssW[i] >= 0 {
			w.RSSMB = float64(rssW[i]) / 1024
		}
		r.Windows = append(r.Windows, w)
	}

	r.RSSMinMB, r.RSSMaxMB = notMeasured, notMeasured
	for i, p := range rss {
		v := float64(p.V) / 1024
		if i == 0 || v < r.RSSMinMB {
			r.RSSMinMB = v
		}
		r.RSSMaxMB = max(r.RSSMaxMB, v)
	}
	r.RSSGrowth = rssGrowth(r.Windows, r.Recovery)
	var producing []float64
	for _, w := range r.Windows {
		if w.Producing {
			producing = append(producing, w.OthersRate)
		}
	}
	r.MeanRate = mean(producing)

	r.MaxGaps, r.GapBytes, r.BytesPerGap = perGap(ts)
	r.MarginalPerGap = marginalPerGap(ts)
	if r.ParkedMax < 0 && d.spec.Special != specialNone {
		r.Notes = append(r.Notes, "the node publishes no keyhook.records.parked: parked records not measured")
	}
}

// rssWarmup is how much of production a node's RSS may grow over while
// its heap, connections and buffers reach their working size; flat is
// judged against the largest RSS in it.
const rssWarmup = time.Minute

// rssGrowth is the RSS of the last production window while the key was
// stuck (ending by recovery, s after production began, when not 0) over
// the largest of the warm-up (the first minute of production, or its
// first third when shorter); notMeasured without readings. What the node
// holds while it reads a recovered key's records back is a transient of
// the recovery, not growth with the stuck key's backlog: the run's
// maximum RSS reports it.
func rssGrowth(ws []stuckWindow, recovery float64) float64 {
	var prod []stuckWindow
	for _, w := range ws {
		if recovery > 0 && w.Start+stuckWidth.Seconds() > recovery {
			continue
		}
		if w.Producing && w.RSSMB >= 0 {
			prod = append(prod, w)
		}
	}
	if len(prod) == 0 {
		return notMeasured
	}
	warm := max(1, min(int(rssWarmup/stuckWidth), len(prod)/3))
	var ref float64
	for _, w := range prod[:warm] {
		ref = max(ref, w.RSSMB)
	}
	if ref <= 0 {
		return notMeasured
	}
	return prod[len(prod)-1].RSSMB / ref
}

// rate sets, given the baseline rate (run a's mean, 0 when run a did not
// run), each window's ratio to what the baseline predicts for this
// run's mix of keys; without a baseline the offered rate of the
// ordinary keys stands in.
func (r *stuckRun) rate(baseline, offered float64) {
	r.MinRatio, r.MinRatioAt = notMeasured, notMeasured
	if baseline <= 0 {
		baseline = offered
		r.Notes = append(r.Notes, "run a did not run: ratios are to the offered rate")
	}
	// Run a has no special key: every record is an ordinary key's.
	r.Expected = baseline * r.OthersShare
	for i := range r.Windows {
		w := &r.Windows[i]
		if !w.Producing || r.Expected <= 0 {
			continue
		}
		w.Ratio = w.OthersRate / r.Expected
		if r.MinRatio < 0 || w.Ratio < r.MinRatio {
			r.MinRatio, r.MinRatioAt = w.Ratio, w.Start
		}
	}
}

// summary is the run's progress line.
func (r *stuckRun) summary() string {
	s := fmt.Sprintf("%s: other keys %.0f rec/s, min %s of expected at %s s; RSS %s–%s MiB; parked max %s; gaps max %d (%s B/gap)",
		r.Outcome, r.MeanRate, num(r.MinRatio, 3), num(r.MinRatioAt, 0), num(r.RSSMinMB, 0), num(r.RSSMaxMB, 0),
		numi(r.ParkedMax), r.MaxGaps, num(r.BytesPerGap, 1))
	if r.SpecialTotal > 0 {
		s += fmt.Sprintf("; special key %d/%d delivered", r.SpecialDone, r.SpecialTotal)
	}
	if r.RecoveredLast >= 0 {
		s += fmt.Sprintf(", its last %.1f s after recovery", r.RecoveredLast)
	}
	s += fmt.Sprintf("; order %d/%d, %d duplicates", r.Overlaps, r.Reorders, r.Duplicates)
	return s
}

// rateWindows counts the times (unix ns) falling in each of n windows of
// width from start, per second.
func rateWindows(times []int64, start int64, width time.Duration, n int) []float64 {
	counts := countWindows(times, start, width, n)
	out := make([]float64, n)
	for i, c := range counts {
		out[i] = float64(c) / width.Seconds()
	}
	return out
}

// countWindows counts the times (unix ns) falling in each of n windows
// of width from start; times outside them are left out.
func countWindows(times []int64, start int64, width time.Duration, n int) []int64 {
	out := make([]int64, n)
	for _, t := range times {
		if t < start {
			continue
		}
		if i := int((t - start) / int64(width)); i < n {
			out[i]++
		}
	}
	return out
}

// windowMax is the largest value of the points falling in each of n
// windows of width from start, notMeasured for a window without one.
func windowMax(ps []point, start int64, width time.Duration, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = notMeasured
	}
	for _, p := range ps {
		if p.T < start {
			continue
		}
		if i := int((p.T - start) / int64(width)); i < n {
			out[i] = max(out[i], p.V)
		}
	}
	return out
}

// perGap finds the tracking sample with the most gaps and returns them,
// the partition's Redis bytes then and those bytes per gap (notMeasured
// without a gap).
func perGap(ts []trackSample) (gaps, bytes int64, per float64) {
	per = notMeasured
	for _, s := range ts {
		if s.Gaps > gaps {
			gaps, bytes = s.Gaps, s.Bytes
		}
	}
	if gaps > 0 {
		per = float64(bytes) / float64(gaps)
	}
	return gaps, bytes, per
}

// marginalPerGap is the bytes the tracking hash grew from the sample
// with the fewest gaps to the one with the most, per gap added
// (notMeasured under 10 gaps apart: the noise of the hash's encoding).
func marginalPerGap(ts []trackSample) float64 {
	if len(ts) == 0 {
		return notMeasured
	}
	lo, hi := ts[0], ts[0]
	for _, s := range ts {
		if s.Gaps > hi.Gaps {
			hi = s
		}
		if s.Gaps < lo.Gaps {
			lo = s
		}
	}
	if hi.Gaps-lo.Gaps < 10 {
		return notMeasured
	}
	return float64(hi.Bytes-lo.Bytes) / float64(hi.Gaps-lo.Gaps)
}

func mean(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	var sum float64
	for _, v := range vs {
		sum += v
	}
	return sum / float64(len(vs))
}

// rssSampler reads a process's resident set every interval until
// stopped.
type rssSampler struct {
	cancel context.CancelFunc
	done   chan struct{}
	// points is written by the sampling goroutine only, read once it
	// ended.
	points []point
}

func startRSSSampler(pid int, every time.Duration) *rssSampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &rssSampler{cancel: cancel, done: make(chan struct{})}
	path := "/proc/" + strconv.Itoa(pid) + "/status"
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if b, err := os.ReadFile(path); err == nil {
				if kb, ok := statusKB(string(b), "VmRSS"); ok {
					s.points = append(s.points, point{time.Now().UnixNano(), kb})
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *rssSampler) stop() []point {
	s.cancel()
	<-s.done
	return s.points
}

// statusKB reads a "Field:   1234 kB" line of /proc/<pid>/status.
func statusKB(status, field string) (int64, bool) {
	for line := range strings.SplitSeq(status, "\n") {
		v, ok := strings.CutPrefix(line, field+":")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		return n, err == nil
	}
	return 0, false
}

func numi(v int64) string {
	if v < 0 {
		return "n/a"
	}
	return strconv.FormatInt(v, 10)
}
