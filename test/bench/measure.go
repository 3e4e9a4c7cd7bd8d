package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// notMeasured marks a number that does not apply to a run or could not be
// taken (JSON has no NaN).
const notMeasured = -1.0

// runResult is what one contender did in one scenario.
type runResult struct {
	Contender contender `json:"contender"`
	Outcome   string    `json:"outcome"`
	Records   int       `json:"records"`
	// Delivered counts distinct records answered 2xx during the run;
	// InWindow those within the measured window, Window its length.
	Delivered int64   `json:"delivered"`
	InWindow  int64   `json:"in_window"`
	Window    float64 `json:"window_s"`
	Rate      float64 `json:"records_per_s"`
	// E2E percentiles, record timestamp to the sink's 2xx, in ms.
	E2EP50 float64 `json:"e2e_p50_ms"`
	E2EP99 float64 `json:"e2e_p99_ms"`
	// SinkOpen is the mean number of requests the sink held open over the
	// window (answered 2xx, each from reading it to answering) and
	// SinkServiceMS their mean time there: the rate is their ratio
	// (Little's law), so rate ÷ ideal splits into what the contender kept
	// in flight and how long the loaded machine took per request.
	// SinkOpenByTenth is SinkOpen in each tenth of the window: where a
	// drain's tail thins out.
	SinkOpen        float64   `json:"sink_open_mean"`
	SinkServiceMS   float64   `json:"sink_service_mean_ms"`
	SinkOpenByTenth []float64 `json:"sink_open_by_tenth,omitempty"`
	// The ordinary keys' records (all records when there is no special
	// key) and the rate at which their first 90% were delivered.
	OthersTotal     int64   `json:"others_total"`
	OthersDelivered int64   `json:"others_delivered"`
	OthersRate      float64 `json:"others_rate"`
	SpecialTotal    int64   `json:"special_total"`
	SpecialDone     int64   `json:"special_delivered"`
	// With a failing record: the records of its key, how many of them were
	// delivered, and the records of other keys delivered only once the
	// failure ended (held back by the stalled partition's full window).
	FailKeyTotal int64 `json:"fail_key_total,omitempty"`
	FailKeyDone  int64 `json:"fail_key_delivered,omitempty"`
	HeldByStall  int64 `json:"held_by_stall,omitempty"`
	// Order: overlapping requests of one key and records of a key answered
	// after a later one (checked for key-ordered contenders only).
	Overlaps   int64 `json:"overlaps"`
	Reorders   int64 `json:"reorders"`
	Duplicates int64 `json:"duplicates"`
	Requests   int64 `json:"requests"`
	Errors     int64 `json:"errors_503"`
	// AttemptErrors counts keyhook's attempts that got no answer at all
	// (connection refused or reset, timeouts), from its own metrics.
	AttemptErrors int64 `json:"attempt_errors"`
	// Redis, keyhook only.
	RedisCommands int64 `json:"redis_commands"`
	// RedisByCommand splits RedisCommands by command name.
	RedisByCommand map[string]int64 `json:"redis_by_command,omitempty"`
	RedisScripts   int64            `json:"redis_scripts"`
	CmdsPerRecord  float64          `json:"redis_commands_per_record"`
	// RedisSent is what keyhook's client sent (keyhook_redis_commands_total):
	// a script call once, where RedisCommands also counts the calls the
	// script makes inside Redis.
	RedisSent     int64   `json:"redis_sent"`
	SentPerRecord float64 `json:"redis_sent_per_record"`
	// The contender process.
	CPUPerRecordUS float64 `json:"cpu_us_per_record"`
	// HeapPerHeld is the live heap above the idle heap per record held
	// (fetched, not yet acked), at the sample holding the most.
	HeapPerHeld float64 `json:"heap_bytes_per_held_record"`
	PeakHeld    int64   `json:"peak_held"`
	PeakPending int64   `json:"peak_pending"`
	PeakRSSMB   float64 `json:"peak_rss_mib"`
	// Tracking state in Redis, keyhook only.
	TrackingMaxBytes  int64         `json:"tracking_max_bytes"`
	TrackingMaxGaps   int64         `json:"tracking_max_gaps"`
	TrackingPerGap    float64       `json:"tracking_bytes_per_gap"`
	TrackingEncPerGap float64       `json:"tracking_encoded_bytes_per_gap"`
	TrackingSamples   []trackSample `json:"tracking_samples,omitempty"`
	// Window: the largest partition window (fetch position minus
	// watermark) and the most partitions paused at once, keyhook only.
	MaxWindow int64 `json:"max_window"`
	PausedMax int64 `json:"paused_max"`
	// ParkedMax is the most records keyhook held parked at once.
	ParkedMax       int64            `json:"parked_max"`
	PartitionWindow map[string]int64 `json:"partition_window,omitempty"`
	// OthersCPU is the share of the machine's CPU that processes outside
	// the bench used during the run: other work on a shared machine.
	OthersCPU float64  `json:"others_cpu_share"`
	Notes     []string `json:"notes,omitempty"`
	// Shared holds a scaling run's numbers (scenario.Nodes).
	Shared *sharedRun `json:"shared,omitempty"`
}

// measure turns the sink's and the child's records into the run's numbers.
func (r *runResult) measure(run *sinkRun, d *dataset, sc scenario, rep childReport, ts []trackSample, limit time.Duration) {
	r.E2EP50, r.E2EP99 = notMeasured, notMeasured
	r.OthersRate, r.CmdsPerRecord, r.SentPerRecord, r.CPUPerRecordUS = notMeasured, notMeasured, notMeasured, notMeasured
	r.HeapPerHeld, r.TrackingPerGap, r.TrackingEncPerGap = notMeasured, notMeasured, notMeasured
	r.PeakRSSMB = float64(rep.VmHWMKB) / 1024
	r.PartitionWindow = rep.PartitionWindow
	r.SpecialTotal = int64(d.specialRecords())
	r.OthersTotal = int64(d.spec.Records) - r.SpecialTotal

	var start, end int64
	if r.Contender.Mode == modeCeilingB {
		r.Delivered = rep.Consumed
		r.InWindow = rep.Consumed
		start, end = rep.FirstAt, rep.LastAt
	} else {
		r.Requests, r.Errors = run.requests.Load(), run.errors.Load()
		r.Overlaps, r.Reorders, r.Duplicates = run.overlaps.Load(), run.reorders.Load(), run.duplicates()
		r.Delivered = run.delivered.Load()
		start, end = r.window(run, limit)
	}
	if end > start {
		r.Window = float64(end-start) / 1e9
		r.Rate = float64(r.InWindow) / r.Window
	}
	r.SinkOpen, r.SinkServiceMS = notMeasured, notMeasured
	if r.Contender.Mode != modeCeilingB && r.Delivered > 0 {
		r.latencies(run, start, end)
		r.open(run, start, end)
		r.others(run, d, start)
		r.stall(run, d, sc)
	}
	if r.InWindow > 0 && len(rep.Samples) > 1 && end > start {
		cpu := cpuAt(rep.Samples, end) - cpuAt(rep.Samples, start)
		r.CPUPerRecordUS = float64(cpu) / 1e3 / float64(r.InWindow)
	}
	for _, s := range rep.Samples {
		r.AttemptErrors = max(r.AttemptErrors, s.AttemptErrors)
		r.MaxWindow = max(r.MaxWindow, s.MaxDistance)
		r.PausedMax = max(r.PausedMax, s.Paused)
		r.ParkedMax = max(r.ParkedMax, s.Parked)
		r.PeakPending = max(r.PeakPending, s.Pending)
		if s.Held > r.PeakHeld {
			r.PeakHeld = s.Held
			if s.HeapLive > rep.IdleHeapLive {
				r.HeapPerHeld = float64(s.HeapLive-rep.IdleHeapLive) / float64(s.Held)
			}
		}
	}
	if r.Contender.Mode == modeKeyhook && r.Delivered > 0 {
		r.CmdsPerRecord = float64(r.RedisCommands) / float64(r.Delivered)
		if rep.RedisSent > 0 {
			r.RedisSent = rep.RedisSent
			r.SentPerRecord = float64(r.RedisSent) / float64(r.Delivered)
		}
		r.tracking(ts)
	}
	if r.Outcome == outcomeCapped {
		r.Notes = append(r.Notes, fmt.Sprintf("ran for its %v cap; rate over that window", limit))
	}
}

// window finds the measured window: from the first 2xx to the last one
// of a complete run, or to the cap of a capped one; it counts the
// records answered within it.
func (r *runResult) window(run *sinkRun, limit time.Duration) (start, end int64) {
	start, last := int64(math.MaxInt64), int64(0)
	for i := range run.firstOK {
		if t := run.firstOK[i].Load(); t > 0 {
			start, last = min(start, t), max(last, t)
		}
	}
	if last == 0 {
		return 0, 0
	}
	end = last
	if r.Outcome != outcomeComplete {
		end = min(last, start+int64(limit))
		if r.Outcome == outcomeCapped {
			end = start + int64(limit)
		}
	}
	for i := range run.firstOK {
		if t := run.firstOK[i].Load(); t > 0 && t <= end {
			r.InWindow++
		}
	}
	return start, end
}

// latencies takes the end-to-end percentiles over the window's records.
func (r *runResult) latencies(run *sinkRun, start, end int64) {
	var lat []int64
	for i := range run.firstOK {
		if t := run.firstOK[i].Load(); t >= start && t <= end && t > 0 {
			lat = append(lat, run.e2e[i].Load())
		}
	}
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	r.E2EP50 = float64(percentile(lat, 0.50)) / 1e6
	r.E2EP99 = float64(percentile(lat, 0.99)) / 1e6
}

// open measures the requests the sink held open during [start, end]: each
// record answered 2xx in the window was open from firstOK − service to
// firstOK, clipped to the window.
func (r *runResult) open(run *sinkRun, start, end int64) {
	if end <= start {
		return
	}
	const tenths = 10
	span := float64(end - start)
	var total, served float64
	var n int
	by := make([]float64, tenths)
	for i := range run.firstOK {
		done := run.firstOK[i].Load()
		if done == 0 || done < start || done > end {
			continue
		}
		svc := run.service[i].Load()
		served += float64(svc)
		n++
		from, to := max(done-svc, start), done
		if to <= from {
			continue
		}
		total += float64(to - from)
		// Spread the interval over the tenths it covers.
		for b := int(float64(from-start) / span * tenths); b < tenths; b++ {
			lo := start + int64(float64(b)*span/tenths)
			hi := start + int64(float64(b+1)*span/tenths)
			if lo >= to {
				break
			}
			if ov := min(to, hi) - max(from, lo); ov > 0 {
				by[b] += float64(ov)
			}
		}
	}
	if n == 0 {
		return
	}
	r.SinkOpen = total / span
	r.SinkServiceMS = served / float64(n) / 1e6
	for b := range by {
		by[b] /= span / tenths
	}
	r.SinkOpenByTenth = by
}

// others measures the ordinary keys: how many were delivered and how fast
// their first 90% went, from the run's first 2xx.
func (r *runResult) others(run *sinkRun, d *dataset, start int64) {
	special := d.spec.Special != specialNone
	var times []int64
	for i := range run.firstOK {
		t := run.firstOK[i].Load()
		if t == 0 {
			continue
		}
		if special && d.key[i] == 0 {
			r.SpecialDone++
			continue
		}
		times = append(times, t)
	}
	r.OthersDelivered = int64(len(times))
	n90 := int64(math.Ceil(0.9 * float64(r.OthersTotal)))
	if n90 == 0 || int64(len(times)) < n90 {
		return
	}
	slices.Sort(times)
	if t90 := times[n90-1]; t90 > start {
		r.OthersRate = float64(n90) / (float64(t90-start) / 1e9)
	}
}

// stall counts, when a record was failing, the records delivered only
// after its failure ended.
func (r *runResult) stall(run *sinkRun, d *dataset, sc scenario) {
	f := sc.Sink.FailRecord
	if f < 0 || f >= d.spec.Records {
		return
	}
	failKey := d.key[f]
	r.FailKeyTotal = int64(d.keyRecords[failKey])
	end := run.failAt.Load() + int64(sc.Sink.FailFor)
	for i := range run.firstOK {
		t := run.firstOK[i].Load()
		switch {
		case t == 0:
		case d.key[i] == failKey:
			r.FailKeyDone++
		case run.failAt.Load() > 0 && t >= end:
			r.HeldByStall++
		}
	}
}

// tracking summarises the tracking samples: the most bytes and gaps, and
// the bytes each gap costs (the marginal MEMORY USAGE between the samples
// with the fewest and the most gaps, and the stored encoding).
func (r *runResult) tracking(ts []trackSample) {
	r.TrackingSamples = ts
	if len(ts) == 0 {
		return
	}
	lo, hi := ts[0], ts[0]
	for _, s := range ts {
		r.TrackingMaxBytes = max(r.TrackingMaxBytes, s.Bytes)
		if s.Gaps > hi.Gaps {
			hi = s
		}
		if s.Gaps < lo.Gaps {
			lo = s
		}
	}
	r.TrackingMaxGaps = hi.Gaps
	if hi.Gaps > 0 {
		r.TrackingEncPerGap = float64(hi.AckedBytes) / float64(hi.Gaps)
	}
	if hi.Gaps-lo.Gaps >= 10 {
		r.TrackingPerGap = float64(hi.Bytes-lo.Bytes) / float64(hi.Gaps-lo.Gaps)
	}
}

// cpuAt interpolates the process's CPU time at t from the samples.
func cpuAt(s []sample, t int64) int64 {
	if t <= s[0].T {
		return s[0].CPU
	}
	for i := 1; i < len(s); i++ {
		if t <= s[i].T {
			a, b := s[i-1], s[i]
			if b.T == a.T {
				return b.CPU
			}
			return a.CPU + (b.CPU-a.CPU)*(t-a.T)/(b.T-a.T)
		}
	}
	return s[len(s)-1].CPU
}

// percentile of sorted values, nearest rank.
func percentile(sorted []int64, p float64) int64 {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// summary is the run's progress line.
func (r *runResult) summary() string {
	s := fmt.Sprintf("%s, %d/%d delivered", r.Outcome, r.Delivered, r.Records)
	if r.OthersCPU > 0.05 {
		s += fmt.Sprintf(", other processes used %.0f%% of the CPUs", 100*r.OthersCPU)
	}
	if r.CPUPerRecordUS >= 0 {
		s += fmt.Sprintf(", %.1f µs CPU/rec", r.CPUPerRecordUS)
	}
	if r.CmdsPerRecord >= 0 {
		s += fmt.Sprintf(", %.3f redis cmds/rec", r.CmdsPerRecord)
	}
	if r.SentPerRecord >= 0 {
		s += fmt.Sprintf(" (%.4f sent)", r.SentPerRecord)
	}
	if r.AttemptErrors > 0 {
		s += fmt.Sprintf(", %d attempts without answer", r.AttemptErrors)
	}
	if r.Overlaps+r.Reorders > 0 {
		s += fmt.Sprintf(", order: %d overlaps %d reorders", r.Overlaps, r.Reorders)
	}
	return s
}
