package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
)

// results is everything one bench run measured.
type results struct {
	Date      string            `json:"date"`
	Command   string            `json:"command"`
	Machine   machine           `json:"machine"`
	Kafka     string            `json:"kafka"`
	Redis     string            `json:"redis"`
	Quick     bool              `json:"quick"`
	Latency   string            `json:"latency"`
	Elapsed   float64           `json:"elapsed_s"`
	Scenarios []*scenarioResult `json:"scenarios"`
	Paced     *pacedResult      `json:"paced,omitempty"`
	Targets   []target          `json:"targets"`
}

type machine struct {
	CPUs   int    `json:"cpus"`
	Model  string `json:"cpu_model"`
	MemMiB int64  `json:"mem_mib"`
	Kernel string `json:"kernel"`
	Go     string `json:"go"`
}

func newResults(opts options, command string, h *harness) *results {
	r := &results{
		Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), Command: command,
		Machine: readMachine(), Kafka: h.kafka.describe(), Quick: opts.quick, Latency: opts.latency,
	}
	info, err := h.rdb.Info(context.Background(), "server").Result()
	r.Redis = "redis-server"
	if err == nil {
		for line := range strings.SplitSeq(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				r.Redis = "redis-server " + v
			}
		}
	}
	return r
}

func readMachine() machine {
	m := machine{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.Model = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %d kB", &kb); err == nil {
			m.MemMiB = kb / 1024
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

func (s *scenarioResult) run(name string) *runResult {
	if s == nil {
		return nil
	}
	for _, r := range s.Runs {
		if r.Contender.Name == name {
			return r
		}
	}
	return nil
}

func (r *results) scenario(id string) *scenarioResult {
	for _, s := range r.Scenarios {
		if s.ID == id {
			return s
		}
	}
	return nil
}

// target is one goal of the issue, checked against what was measured.
type target struct {
	Scenario string `json:"scenario"`
	Goal     string `json:"goal"`
	Measured string `json:"measured"`
	// Status is PASS, MISS or "not measured".
	Status string `json:"status"`
}

const (
	statusPass = "PASS"
	statusMiss = "MISS"
	statusNA   = "not measured"
)

func (r *results) add(scenario, goal string, ok bool, format string, args ...any) {
	st := statusMiss
	if ok {
		st = statusPass
	}
	r.Targets = append(r.Targets, target{Scenario: scenario, Goal: goal, Measured: fmt.Sprintf(format, args...), Status: st})
}

func (r *results) missing(scenario, goal, why string) {
	r.Targets = append(r.Targets, target{Scenario: scenario, Goal: goal, Measured: why, Status: statusNA})
}

// noisyShare is the share of the CPUs above which other processes make a
// comparison between runs unreliable.
const noisyShare = 0.15

// noisy warns when other processes took a large share of the machine
// during any of the runs a target compares.
func noisy(runs ...*runResult) string {
	var parts []string
	for _, r := range runs {
		if r != nil && r.OthersCPU > noisyShare {
			parts = append(parts, fmt.Sprintf("%s %.0f%%", r.Contender.Name, 100*r.OthersCPU))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "; other processes took CPU during the runs compared (" + strings.Join(parts, ", ") + "): unreliable"
}

// ideal is max_in_flight divided by the endpoint's mean latency.
func ideal(sc scenario) float64 {
	m := sc.Sink.Latency.mean()
	if m <= 0 {
		return 0
	}
	return float64(sc.MaxInFlight) / m.Seconds()
}

// evaluate checks every target of the issue against the runs.
func (r *results) evaluate() {
	s1 := r.scenario("1")
	kh1, bl1 := s1.run(cKey.Name), s1.run(cBaseline.Name)
	if s1 != nil {
		if kh1 != nil && bl1 != nil && bl1.Rate > 0 {
			x := kh1.Rate / bl1.Rate
			r.add("1", "keyhook ≥ 100× baseline", x >= 100, "%.0f× (%.0f vs %.1f rec/s)%s", x, kh1.Rate, bl1.Rate, noisy(kh1, bl1))
		}
		// The rate targets are ratios to what keyhook's HTTP client alone
		// reached with the same requests in the same run (ceiling A): on
		// a machine shared with the broker and the sink, in-flight ÷
		// latency is a figure no client reaches.
		ca1 := s1.run(cCeilingA.Name)
		if kh1 != nil {
			switch {
			case ca1 == nil || ca1.Rate <= 0:
				r.missing("1", goalCeilingA, "ceiling A not run in this invocation")
			default:
				x := kh1.Rate / ca1.Rate
				r.add("1", goalCeilingA, x >= 0.95, "%.2f× (%.0f vs %.0f rec/s; %.2f× in-flight÷latency)%s",
					x, kh1.Rate, ca1.Rate, kh1.Rate/ideal(s1.Scenario), noisy(kh1, ca1))
			}
		}
		switch pc := s1.run(cParallel.Name); {
		case kh1 == nil || pc == nil:
		case pc.Outcome == outcomeSkipped:
			r.missing("1", goalParallel, strings.Join(pc.Notes, "; "))
		case pc.Rate > 0:
			// Three times the Parallel Consumer, or what the HTTP client
			// alone allows when that is less: no consumer can deliver
			// more than its client sends.
			want, capped := 3*pc.Rate, ""
			if ca1 != nil && ca1.Rate > 0 && 0.95*ca1.Rate < want {
				want = 0.95 * ca1.Rate
				capped = fmt.Sprintf("; 3× is %.0f rec/s, more than 0.95× ceiling A (%.0f)", 3*pc.Rate, want)
			}
			x := kh1.Rate / pc.Rate
			r.add("1", goalParallel, kh1.Rate >= want, "%.2f× (%.0f vs %.0f rec/s; CPU per record %.1f vs %.1f µs)%s%s",
				x, kh1.Rate, pc.Rate, kh1.CPUPerRecordUS, pc.CPUPerRecordUS, capped, noisy(kh1, pc))
		}
	}
	for _, id := range []string{"2a", "2b"} {
		s := r.scenario(id)
		kh := s.run(cKey.Name)
		if s == nil || kh == nil {
			continue
		}
		if kh1 == nil || kh1.OthersRate <= 0 {
			r.missing(id, "other keys ≥ 90% of scenario 1", "scenario 1 not run in this invocation")
		} else if kh.OthersRate <= 0 {
			r.add(id, "other keys ≥ 90% of scenario 1", false, "90%% of the other keys' records not delivered within the %.0f s window (%d of %d)",
				kh.Window, kh.OthersDelivered, kh.OthersTotal)
		} else {
			x := kh.OthersRate / kh1.OthersRate
			r.add(id, "other keys ≥ 90% of scenario 1", x >= 0.9, "%.0f%% (%.0f vs %.0f rec/s, first 90%% of their records)%s", 100*x, kh.OthersRate, kh1.OthersRate, noisy(kh, kh1))
		}
		name := map[string]string{"2a": "slow", "2b": "hot"}[id]
		r.add(id, name+" key order holds", kh.Overlaps == 0 && kh.Reorders == 0 && kh.SpecialDone > 0,
			"%d of its records delivered, %d overlapping requests, %d out of order", kh.SpecialDone, kh.Overlaps, kh.Reorders)
		if id == "2b" {
			// Backpressure belongs to the hot key: its records beyond
			// --park-after are parked, its partition keeps fetching.
			r.add(id, "backpressure on the hot key alone (its records parked, no partition paused)", kh.ParkedMax > 0 && kh.PausedMax == 0,
				"up to %d records parked, %d partition(s) paused; largest distance from the watermark %d records", kh.ParkedMax, kh.PausedMax, kh.MaxWindow)
		}
	}
	if s3 := r.scenario("3"); s3 != nil {
		kh, ca := s3.run(cKey.Name), s3.run(cCeilingA.Name)
		if kh != nil && ca != nil && ca.Rate > 0 {
			x := kh.Rate / ca.Rate
			r.add("3", "keyhook ≥ 0.5× ceiling A", x >= 0.5, "%.2f× (%.0f vs %.0f rec/s)%s", x, kh.Rate, ca.Rate, noisy(kh, ca))
		}
		if kh != nil {
			r.add("3", "Redis commands/record ≤ 0.05", kh.CmdsPerRecord >= 0 && kh.CmdsPerRecord <= 0.05, "%.4f (%d commands, %d script calls)", kh.CmdsPerRecord, kh.RedisCommands, kh.RedisScripts)
			// The stretch goal is what keyhook sends: a flush round is one
			// script call, whatever it runs inside Redis.
			if kh.SentPerRecord < 0 {
				r.missing("3", "Redis commands/record ≤ 0.01 (stretch)", "keyhook_redis_commands_total not read")
			} else {
				r.add("3", "Redis commands/record ≤ 0.01 (stretch)", kh.SentPerRecord <= 0.01, "%.4f sent; %.4f counting the calls inside scripts", kh.SentPerRecord, kh.CmdsPerRecord)
			}
			switch {
			case kh.CPUPerRecordUS < 0 || ca == nil || ca.CPUPerRecordUS < 0:
				r.missing("3", goalCPU, "no CPU samples of keyhook or of ceiling A")
			default:
				r.add("3", goalCPU, kh.CPUPerRecordUS <= ca.CPUPerRecordUS+10, "%.1f µs vs ceiling A %.1f µs (%.2f×)%s",
					kh.CPUPerRecordUS, ca.CPUPerRecordUS, kh.CPUPerRecordUS/ca.CPUPerRecordUS, noisy(kh, ca))
			}
			if kh.HeapPerHeld < 0 {
				r.missing("3", "≤ 2 KB heap per in-flight record", "no record was held at a sample")
			} else {
				r.add("3", "≤ 2 KB heap per in-flight record", kh.HeapPerHeld <= 2048, "%.0f B (%d records held at the peak, %d of them pending in the windows)", kh.HeapPerHeld, kh.PeakHeld, kh.PeakPending)
			}
		}
	}
	if s4 := r.scenario("4"); s4 != nil {
		if kh := s4.run(cKey.Name); kh != nil {
			if kh1 == nil {
				r.missing("4", "within 20% of scenario 1", "scenario 1 not run in this invocation")
			} else {
				x := kh.Rate / kh1.Rate
				r.add("4", "within 20% of scenario 1", x >= 0.8 && x <= 1.2, "%.0f%% (%.0f vs %.0f rec/s)%s", 100*x, kh.Rate, kh1.Rate, noisy(kh, kh1))
			}
		}
	}
	if s5 := r.scenario("5"); s5 != nil {
		if kh := s5.run(cKey.Name); kh != nil {
			per, how := kh.TrackingPerGap, "marginal MEMORY USAGE"
			if per < 0 {
				per, how = kh.TrackingEncPerGap, "stored encoding"
			}
			if per < 0 {
				r.missing("5", "tracking ≤ 64 bytes per gap", "no gap was seen in the tracking state")
			} else {
				r.add("5", "tracking ≤ 64 bytes per gap", per <= 64, "%.1f B/gap (%s; up to %d gaps, %d B in Redis; encoding %.1f B/gap)",
					per, how, kh.TrackingMaxGaps, kh.TrackingMaxBytes, kh.TrackingEncPerGap)
			}
			if kh1 == nil || kh1.OthersRate <= 0 {
				r.missing("5", "no cliff: other keys ≥ 90% of scenario 1 while the watermark stalls", "scenario 1 not run in this invocation")
			} else if kh.OthersRate <= 0 {
				r.add("5", "no cliff: other keys ≥ 90% of scenario 1 while the watermark stalls", false, "90%% of the other records not delivered")
			} else {
				x := kh.OthersRate / kh1.OthersRate
				r.add("5", "no cliff: other keys ≥ 90% of scenario 1 while the watermark stalls", x >= 0.9, "%.0f%% (%.0f vs %.0f rec/s, first 90%% of the records; %d records of other keys waited for the failure to end)%s",
					100*x, kh.OthersRate, kh1.OthersRate, kh.HeldByStall, noisy(kh, kh1))
			}
		}
	}
	for _, s := range r.Scenarios {
		if len(s.Scenario.Nodes) > 0 {
			r.evaluateScaling(s)
		}
		if s.Stuck != nil {
			r.evaluateStuck(s)
		}
	}
	if p := r.Paced; p != nil {
		switch {
		case p.P99 < 0:
			r.missing("1", goalP99, "no record delivered")
		case p.KafkaP99 < 0:
			r.missing("1", goalP99, "Kafka alone not measured")
		default:
			warn := ""
			if p.OthersCPU > noisyShare {
				warn = fmt.Sprintf("; other processes took %.0f%% of the CPUs meanwhile", 100*p.OthersCPU)
			}
			limit := p.KafkaP99 + p.ServiceP99 + 20
			r.add("1", goalP99, p.P99 <= limit,
				"p99 %.1f ms vs %.1f + %.1f + 20 ms (p50 %.1f ms at %.0f rec/s; from a free key p99 %.1f ms; to the sink, key free, p99 %.1f ms)%s",
				p.P99, p.KafkaP99, p.ServiceP99, p.P50, p.Achieved, p.KeyFreeP99, p.ToSinkFreshP99, warn)
		}
	}
}

// The targets measured against the ceilings of the same run.
const (
	goalCeilingA = "keyhook ≥ 0.95× ceiling A (the same requests from keyhook's HTTP client alone)"
	goalParallel = "keyhook ≥ 3× Parallel Consumer (same max_in_flight), at most 0.95× ceiling A"
	goalCPU      = "CPU/record ≤ ceiling A's + 10 µs (Kafka, the partition machine and the tracking)"
	goalP99      = "p99 e2e ≤ Kafka alone p99 + the sink's p99 + 20 ms at 50% load"
)

// write saves results.md, results.json, throughput.png and, with
// scenario 7, stuck.png under dir.
func (r *results) write(dir string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("bench: results json: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), b, 0o644); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(r.markdown()), 0o644); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	// The stuck-key scenario has no throughput bar but a chart of its own.
	bars := *r
	bars.Scenarios = throughputScenarios(r.Scenarios)
	if len(bars.Scenarios) > 0 {
		if err := writeChart(filepath.Join(dir, "throughput.png"), &bars); err != nil {
			return err
		}
	}
	for _, s := range r.Scenarios {
		if s.Stuck != nil {
			if err := writeStuckChart(filepath.Join(dir, "stuck.png"), r, s); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *results) markdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# keyhook benchmarks\n\n")
	w("- command: `%s`\n", r.Command)
	w("- date: %s; the run took %.0f s\n", r.Date, r.Elapsed)
	w("- machine: %d CPUs, %s, %d MiB, Linux %s, %s\n", r.Machine.CPUs, r.Machine.Model, r.Machine.MemMiB, r.Machine.Kernel, r.Machine.Go)
	w("- Kafka: %s; Redis: %s, persistence off\n", r.Kafka, r.Redis)
	w("- every contender runs as its own process; the Kafka, the Redis, the sink and the producer share the machine with it\n")
	if r.Quick {
		w("- **quick run**: small record counts and short caps; the numbers show the harness works, not keyhook's speed\n")
	}
	w("\n## Targets\n\n| scenario | goal | measured | status |\n|---|---|---|---|\n")
	for _, t := range r.Targets {
		w("| %s | %s | %s | %s |\n", t.Scenario, t.Goal, t.Measured, t.Status)
	}
	for _, s := range r.Scenarios {
		r.scenarioMarkdown(&b, s)
	}
	if p := r.Paced; p != nil {
		w("\n## Scenario 1 at half load (paced)\n\n")
		w("keyhook (ordering key) on scenario 1's endpoint while records are produced at %.0f rec/s (half of its scenario-1 drain rate) for %.0f s.\n\n", p.Rate, p.Duration)
		w("| produced rec/s | delivered | measured | e2e p50 ms | e2e p99 ms | e2e p99.9 ms | from a free key p99 ms | to the sink p50 / p99 ms | Kafka alone p50 / p99 ms | of which produce acked p50 / p99 ms | endpoint p99 ms (set / realised) | attempts without answer | window | paused | others' CPU |\n")
		w("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		w("| %.0f | %d/%d | %d | %s | %s | %s | %s | %s / %s | %s / %s | %s / %s | %.1f / %s | %d | %d | %d | %s |\n", p.Achieved, p.Delivered, p.Records, p.Measured,
			num(p.P50, 1), num(p.P99, 1), num(p.P999, 1), num(p.KeyFreeP99, 1), num(p.ToSinkP50, 1), num(p.ToSinkP99, 1),
			num(p.KafkaP50, 1), num(p.KafkaP99, 1),
			num(p.ProduceAckP50, 1), num(p.ProduceAckP99, 1), p.EndpointP99, num(p.ServiceP99, 1), p.AttemptErrors, p.MaxWindow, p.PausedMax, pct(p.OthersCPU))
		w("\n*From a free key*: from the record's timestamp or, when its key was still busy with the previous record, from that record's 2xx: the latency ordering key itself does not impose (%d of the measured records waited for their key). *To the sink*: the same start, to the sink reading the request: Kafka, keyhook and the HTTP client, without the endpoint's own time. *Kafka alone*: the same start, to a plain consumer of the same topic (its partitions assigned, no group; keyhook's fetch settings; nothing delivered) polling the record meanwhile: Kafka's own share of the latency under this load, on this machine. *Produce acked*: from the record's timestamp to the producer's acknowledgement, an upper bound of the time before the broker had the record, which no consumer can make up. *Realised*: the sink's own p99 time on the requests, timers on a loaded machine included.\n", p.Waited)
		w("\nTo the sink p99 of the records whose key was free when produced: %s ms; of those that waited for their key, from the previous record's 2xx (keyhook's turnaround): %s ms.\n", num(p.ToSinkFreshP99, 1), num(p.ToSinkWaitedP99, 1))
		w("\nWorst e2e (ms) of the records produced in each second: %s\n", wholes(p.WorstPerSecond))
		for _, n := range p.Notes {
			w("\n- %s", n)
		}
		w("\n")
	}
	w("\n## How to read this\n\n")
	w("- **records/s**: distinct records answered 2xx per second, from the first 2xx to the last (a complete run) or over the cap (a capped run). Serial contenders (baseline, ordering partition) deliver one record at a time per partition; at 50 ms they would need hours to drain, so they run for a fixed cap.\n")
	w("- **×ideal**: records/s divided by max_in_flight ÷ mean endpoint latency.\n")
	w("- **open at sink**, **sink ms**: the mean number of requests the sink held open over the window (each answered 2xx, from reading it to answering) and their mean time there. records/s is about their ratio (Little's law), so ×ideal splits into what the contender kept in flight (of max_in_flight) and how much longer than the nominal latency the loaded machine took per request. For the keyhook runs, a note gives the requests open in each tenth of the window: a drain's tail shows as its last tenths thinning out.\n")
	w("- **e2e**: from the record's timestamp (taken when it was produced, carried in the body) to the sink's 2xx. In the drain runs each contender's records were all produced just before it started, so e2e is how long each record of that burst waited (process start and group join included; ceiling A stamps each record when it sends it); the paced run is the latency measurement under steady load.\n")
	w("- **Redis cmds/rec**: INFO commandstats delta over the run (every call, those inside Lua scripts included, less the bench's own sampling and INFO), divided by the records delivered in the run: a flush round counts its one script call, the one TIME it reads and, per partition, the HMGET and HSET it runs. The ≤ 0.05 target of scenario 3 judges this figure.\n")
	w("- **Redis sent/rec**: the commands keyhook's Redis client sent over the node's life (keyhook_redis_commands_total: each pipelined command and each script call once, so a flush round of all the node's partitions counts one), divided by the records delivered in the run; what the node costs in Redis requests. The ≤ 0.01 stretch target of scenario 3 judges this figure.\n")
	w("- **CPU µs/rec**: user+system CPU of the contender's process over the measured window (getrusage samples every 100 ms, interpolated) divided by the records delivered in it.\n")
	w("- **heap B/held**: live heap (runtime/metrics /gc/heap/live:bytes) above the live heap before the first record, divided by the records keyhook held (fetched and not yet acked: in flight, queued on a lane, or fetched beyond a full window and waiting for room; keyhook_records_fetched minus delivered and dead-lettered), at the sample holding the most. Connection buffers and goroutines of the 1,000 in-flight requests are in the numerator too.\n")
	w("- **peak RSS**: the contender's VmHWM.\n")
	w("- **tracking**: MEMORY USAGE summed over the partitions' tracking keys, sampled every 500 ms; gaps are the acked ranges above the watermark.\n")
	w("- **others' CPU**: the share of the machine's CPU capacity (/proc/stat) used during the run by processes outside the bench (this process, its children and its redis-server): the machine is shared, and a high share makes that run's numbers pessimistic.\n")
	w("- **window**: the largest keyhook_watermark_distance (fetch position minus watermark) of any partition; **paused**: the most partitions paused at once (keyhook_partition_paused).\n")
	w("- **other keys**: the records of every key but the slow or hot one; their rate is how fast the first 90%% of them were delivered, from the run's first 2xx.\n")
	return b.String()
}

func (r *results) scenarioMarkdown(b *strings.Builder, s *scenarioResult) {
	if s.Stuck != nil {
		stuckMarkdown(b, s)
		return
	}
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	sc := s.Scenario
	w("\n## Scenario %s: %s\n\n", s.ID, s.Title)
	perNode := ""
	if len(sc.Nodes) > 0 {
		perNode = " per node"
	}
	w("%d records%s, %d keys, %d partitions, %d-byte values, max_in_flight %d%s, endpoint %s", sc.Data.Records, perNode, sc.Data.Keys, sc.Partitions, sc.Data.ValueBytes, sc.MaxInFlight, perNode, sc.Sink.Latency)
	if sc.Sink.ErrorRate > 0 {
		w(", %.1f%% of attempts answered 503", 100*sc.Sink.ErrorRate)
	}
	w("; each contender's copy of the records was produced in at most %.1f s, just before it started.\n\n", s.Preload)
	bl, ca := s.run(cBaseline.Name), s.run(cCeilingA.Name)
	id := ideal(sc)
	w("| contender | outcome | delivered | window s | records/s | ×baseline | ×ideal | ×ceiling A | open at sink | sink ms | e2e p50 ms | e2e p99 ms | Redis cmds/rec | Redis sent/rec | CPU µs/rec | heap B/held | peak RSS MiB | tracking max B | window | paused | others' CPU |\n")
	w("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range s.Runs {
		ratio := func(o *runResult) string {
			if o == nil || o.Rate <= 0 || o == r {
				return "–"
			}
			return fmt.Sprintf("%.2f", r.Rate/o.Rate)
		}
		xi := "–"
		if id > 0 {
			n := 1
			if r.Shared != nil {
				n = r.Shared.Nodes // each node brings its own max_in_flight
			}
			xi = fmt.Sprintf("%.2f", r.Rate/(id*float64(n)))
		}
		keyhook := r.Contender.Mode == modeKeyhook
		w("| %s | %s | %d/%d | %.1f | %.0f | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.0f | %s | %s | %s | %s |\n",
			r.Contender.Name, r.Outcome, r.Delivered, r.Records, r.Window, r.Rate,
			ratio(bl), xi, ratio(ca), num(r.SinkOpen, fine(r.SinkOpen, 10, 0, 1)), num(r.SinkServiceMS, fine(r.SinkServiceMS, 1, 1, 3)), num(r.E2EP50, 0), num(r.E2EP99, 0),
			onlyIf(keyhook, num(r.CmdsPerRecord, 4)), onlyIf(keyhook, num(r.SentPerRecord, 4)), num(r.CPUPerRecordUS, 1), onlyIf(keyhook, num(r.HeapPerHeld, 0)), r.PeakRSSMB,
			onlyIf(keyhook, fmt.Sprint(r.TrackingMaxBytes)), onlyIf(keyhook, fmt.Sprint(r.MaxWindow)), onlyIf(keyhook, fmt.Sprint(r.PausedMax)),
			pct(r.OthersCPU))
	}
	if sc.Data.Special != specialNone {
		w("\n| contender | other keys delivered | other keys rec/s (first 90%%) | %s key delivered | order: overlaps / reorders | partition windows (max per partition) |\n|---|---|---|---|---|---|\n", sc.Data.Special)
		for _, r := range s.Runs {
			if r.Contender.Mode == modeCeilingB {
				continue
			}
			w("| %s | %d/%d | %s | %d/%d | %s | %s |\n", r.Contender.Name, r.OthersDelivered, r.OthersTotal, num(r.OthersRate, 0),
				r.SpecialDone, r.SpecialTotal, orderCell(r), windows(r.PartitionWindow))
		}
	}
	if sc.Sink.FailRecord >= 0 {
		w("\n| contender | delivered | rec/s (first 90%%) | failing key's records delivered | other keys' records delivered only after the failure ended | order: overlaps / reorders | partition windows (max per partition) |\n|---|---|---|---|---|---|---|\n")
		for _, r := range s.Runs {
			if r.Contender.Mode == modeCeilingB {
				continue
			}
			w("| %s | %d/%d | %s | %d/%d | %d | %s | %s |\n", r.Contender.Name, r.OthersDelivered, r.OthersTotal, num(r.OthersRate, 0),
				r.FailKeyDone, r.FailKeyTotal, r.HeldByStall, orderCell(r), windows(r.PartitionWindow))
		}
	}
	if len(sc.Nodes) > 0 {
		scalingMarkdown(b, s)
	}
	if sc.Sink.FailRecord >= 0 {
		if kh := s.run(cKey.Name); kh != nil && len(kh.TrackingSamples) > 0 {
			w("\nTracking state of keyhook key while record %d was failing (every 500 ms sample, condensed): ", sc.Sink.FailRecord)
			w("%s\n", trackingTimeline(kh.TrackingSamples))
		}
	}
	var notes []string
	notes = append(notes, sc.Notes...)
	notes = append(notes, peerNotes(s)...)
	for _, r := range s.Runs {
		if len(r.RedisByCommand) > 0 {
			notes = append(notes, r.Contender.Name+": Redis commands by name: "+byName(r.RedisByCommand))
		}
	}
	for _, r := range s.Runs {
		switch {
		case r.Contender.Batch > 1 && r.Requests > 0:
			// The sink counts a batch's records, not its requests, as open.
			notes = append(notes, fmt.Sprintf("%s: %d requests carried the %d records, %.1f per request", r.Contender.Name, r.Requests, r.Delivered, float64(r.Delivered)/float64(r.Requests)))
		case r.Contender.Mode == modeKeyhook && r.Outcome == outcomeComplete && len(r.SinkOpenByTenth) > 0 && len(sc.Nodes) == 0:
			notes = append(notes, r.Contender.Name+": requests open at the sink in each tenth of the window: "+wholes(r.SinkOpenByTenth))
		}
	}
	for _, r := range s.Runs {
		for _, n := range r.Notes {
			notes = append(notes, r.Contender.Name+": "+n)
		}
	}
	if len(notes) > 0 {
		w("\n")
		for _, n := range notes {
			w("- %s\n", n)
		}
	}
}

// wholes lists v rounded to whole numbers, comma-separated.
func wholes(v []float64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(parts, ", ")
}

func byName(m map[string]int64) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		return m[names[i]] > m[names[j]] || m[names[i]] == m[names[j]] && names[i] < names[j]
	})
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

func orderCell(r *runResult) string {
	if r.Contender.Mode == modeCeilingA || r.Contender.Mode == modeWrk || r.Contender.Ordering == "none" {
		return "not checked (no order promised)"
	}
	return fmt.Sprintf("%d / %d", r.Overlaps, r.Reorders)
}

func windows(m map[string]int64) string {
	if len(m) == 0 {
		return "–"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if len(keys[i]) != len(keys[j]) {
			return len(keys[i]) < len(keys[j])
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("p%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// trackingTimeline condenses tracking samples to at most a dozen points.
func trackingTimeline(ts []trackSample) string {
	step := max(1, len(ts)/12)
	var parts []string
	t0 := ts[0].T
	for i := 0; i < len(ts); i += step {
		s := ts[i]
		parts = append(parts, fmt.Sprintf("%.0fs: %d gaps, %d B", float64(s.T-t0)/1e9, s.Gaps, s.Bytes))
	}
	return strings.Join(parts, "; ")
}

func pct(v float64) string {
	if v < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f%%", 100*v)
}

func num(v float64, prec int) string {
	if v < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.*f", prec, v)
}

// fine is prec, or more precision when v is below limit: a 0 ms
// endpoint's figures would otherwise all read 0.
func fine(v, limit float64, prec, finer int) int {
	if v >= 0 && v < limit {
		return finer
	}
	return prec
}

func onlyIf(ok bool, s string) string {
	if !ok {
		return "n/a"
	}
	return s
}
