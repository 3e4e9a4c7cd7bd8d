package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(childMain(spec))
	}
	opts, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	command := strings.Join(append([]string{"go run ./test/bench"}, os.Args[1:]...), " ")
	if _, err := run(ctx, opts, command, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scenarios := fs.String("scenarios", "1,2,3,4,5,6", "scenarios to run, comma-separated (2 runs 2a and 2b; 7, the stuck key, ~25 minutes, only when named)")
	contenders := fs.String("contenders", "", "keep only these contenders, comma-separated: baseline, key, partition, none, ceiling-a, ceiling-b, parallel-consumer, wrk, key-batch (scenario 3 only), key-shared (scenarios 1 and 3) (default all)")
	records := fs.Int("records", 0, "records per scenario, overriding each scenario's own count")
	out := fs.String("out", filepath.Join("test", "bench", "results"), "directory for results.md, results.json and throughput.png")
	quick := fs.Bool("quick", false, "a CI-sized smoke run: few records, short caps")
	latency := fs.String("latency", distFixed, "latency distribution of the 50 ms endpoint: fixed, uniform (25–75 ms) or lognormal (median 45 ms, σ 0.45)")
	errorRate := fs.Float64("error-rate", 0, "share of attempts the endpoint answers 503")
	maxWindow := fs.Int64("max-window", 0, "keyhook's per-partition window (0: its default)")
	idleConns := fs.Int("idle-conns", 0, "the webhooks client's MaxIdleConnsPerHost for keyhook and ceiling A (0: its default, as cmd/keyhook runs it)")
	flushInterval := fs.Duration("flush-interval", 0, "keyhook's tracking flush interval (0: its default)")
	kafka := fs.String("kafka", kafkaAuto, "the Kafka: auto (the broker of "+kafkaBrokersEnv+" when set, else a real broker the bench starts with scripts/kafka.sh when java and mvn are on PATH, needed by the Parallel Consumer; kfake for -quick or without Java), kfake or real")
	profile := fs.Bool("profile", false, "write pprof CPU and allocation profiles of every keyhook run to <out>/profiles")
	stuck := defaultStuck
	fs.Float64Var(&stuck.Rate, "stuck-rate", stuck.Rate, "scenario 7: records produced per second")
	fs.DurationVar(&stuck.Baseline, "stuck-baseline", stuck.Baseline, "scenario 7: production of run a, no failure (0 skips it: ratios to the offered rate)")
	fs.DurationVar(&stuck.Fail, "stuck-fail", stuck.Fail, "scenario 7: how long run b's key fails (503), production running meanwhile (0 skips run b)")
	fs.DurationVar(&stuck.After, "stuck-after", stuck.After, "scenario 7: production of run b after its key recovered")
	fs.Float64Var(&stuck.FailShare, "stuck-share", stuck.FailShare, "scenario 7: share of the records carried by run b's failing key")
	fs.DurationVar(&stuck.FailDrain, "stuck-drain", stuck.FailDrain, "scenario 7: how long run b may take to deliver the rest once production ended")
	fs.DurationVar(&stuck.Slow, "stuck-slow", stuck.Slow, "scenario 7: production of run c, one key answered in 1 s (0 skips run c)")
	fs.Float64Var(&stuck.SlowShare, "stuck-slow-share", stuck.SlowShare, "scenario 7: share of the records carried by run c's slow key")
	fs.DurationVar(&stuck.SlowDrain, "stuck-slow-drain", stuck.SlowDrain, "scenario 7: how long run c may take to deliver the rest once production ended")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bench: unexpected arguments %q\n", fs.Args())
		return options{}, errors.New("bench: unexpected arguments")
	}
	if *errorRate < 0 || *errorRate >= 1 {
		fmt.Fprintln(stderr, "bench: -error-rate must be in [0, 1)")
		return options{}, errors.New("bench: bad -error-rate")
	}
	switch *kafka {
	case kafkaAuto, kafkaFake, kafkaReal:
	default:
		fmt.Fprintf(stderr, "bench: -kafka must be auto, kfake or real, not %q\n", *kafka)
		return options{}, errors.New("bench: bad -kafka")
	}
	if err := stuck.validate(); err != nil {
		fmt.Fprintln(stderr, err)
		return options{}, err
	}
	o := options{
		records: *records, out: *out, quick: *quick, latency: *latency,
		errorRate: *errorRate, maxWindow: *maxWindow, idleConns: *idleConns, flushInterval: *flushInterval, profile: *profile,
		stuck: stuck, kafka: *kafka,
	}
	o.scenarios = splitList(*scenarios)
	o.contenders = splitList(*contenders)
	return o, nil
}

// run runs the selected scenarios and writes the results; progress goes
// to progress, the children's warnings and errors to <out>/children.log
// (removed when empty).
func run(ctx context.Context, opts options, command string, progress io.Writer) (*results, error) {
	scs, err := buildScenarios(opts)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.out, 0o755); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if opts.profile {
		if err := os.MkdirAll(filepath.Join(opts.out, "profiles"), 0o755); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
	}
	logPath := filepath.Join(opts.out, "children.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer func() {
		// Children log only warnings and errors; an empty log is noise.
		if st, err := logf.Stat(); err == nil && st.Size() == 0 {
			_ = os.Remove(logPath)
		}
		_ = logf.Close()
	}()
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	h, err := newHarness(hctx, opts, logf, progress)
	if err != nil {
		return nil, err
	}
	defer h.close()

	started := time.Now()
	res := newResults(opts, command, h)
	sz := fullSizes
	if opts.quick {
		sz = quickSizes
	}
	for _, sc := range scs {
		sr, err := h.runScenario(ctx, sc)
		if err != nil {
			return nil, err
		}
		res.Scenarios = append(res.Scenarios, sr)
		if sc.ID == "1" {
			if kh := sr.run(cKey.Name); kh != nil && kh.Rate > 0 {
				h.logf("paced run: keyhook key at 50%% of %.0f rec/s for %v", kh.Rate, sz.paced)
				p, err := h.runPaced(ctx, sc, kh.Rate/2, sz.paced, sz.warmup)
				if err != nil {
					return nil, err
				}
				res.Paced = p
				h.logf("  p50 %.1f ms, p99 %.1f ms, from a free key p99 %.1f ms, to the sink p50 %.1f p99 %.1f ms (produce acked p50 %.1f p99 %.1f ms; endpoint p99 %.1f ms, realised %.1f ms), %d attempts without answer, window %d, paused %d",
					p.P50, p.P99, p.KeyFreeP99, p.ToSinkP50, p.ToSinkP99, p.ProduceAckP50, p.ProduceAckP99, p.EndpointP99, p.ServiceP99, p.AttemptErrors, p.MaxWindow, p.PausedMax)
			}
		}
	}
	res.Elapsed = time.Since(started).Seconds()
	res.evaluate()
	if err := res.write(opts.out); err != nil {
		return nil, err
	}
	h.logf("results in %s (%.0f s)", opts.out, res.Elapsed)
	return res, nil
}

func splitList(s string) []string {
	var out []string
	for v := range strings.SplitSeq(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
