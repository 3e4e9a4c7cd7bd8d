package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The Confluent Parallel Consumer contender: the JVM library that keyhook
// is most often compared with, consuming the same records in key order
// with max_in_flight concurrent posts (its maxConcurrency) through a
// blocking HTTP client. Its source is in test/bench/pc; the harness builds
// it with Maven when java and mvn are on PATH, and reports it skipped
// otherwise.

const modeParallelConsumer = "parallel-consumer"

var cParallel = contender{Name: "Parallel Consumer key", Mode: modeParallelConsumer, Ordering: "key"}

// parallelConsumerDirs is where the contender's Maven project is, from
// the repository root (go run ./test/bench) or from test/bench (go test).
var parallelConsumerDirs = []string{filepath.Join("test", "bench", "pc"), "pc"}

// parallelBuild builds the contender's jar once per bench run.
type parallelBuild struct {
	once sync.Once
	jar  string
	// skip says why the contender cannot run here, "" when it can.
	skip string
}

// build returns the jar, or why there is none. Maven's output goes to logw.
func (b *parallelBuild) build(ctx context.Context, logw io.Writer) (jar, skip string) {
	b.once.Do(func() { b.jar, b.skip = buildParallelConsumer(ctx, logw) })
	return b.jar, b.skip
}

func buildParallelConsumer(ctx context.Context, logw io.Writer) (jar, skip string) {
	for _, tool := range []string{"java", "mvn"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", "skipped: " + tool + " not found in PATH (apt-get install -y openjdk-17-jdk-headless maven)"
		}
	}
	dir := ""
	for _, d := range parallelConsumerDirs {
		if _, err := os.Stat(filepath.Join(d, "pom.xml")); err == nil {
			dir, _ = filepath.Abs(d)
			break
		}
	}
	if dir == "" {
		return "", "skipped: test/bench/pc/pom.xml not found (run the bench from the repository root)"
	}
	cmd := exec.CommandContext(ctx, "mvn", "-q", "-B", "package", "-DskipTests")
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, logw, logw
	if err := cmd.Run(); err != nil {
		return "", fmt.Sprintf("skipped: mvn package in %s failed (%v; see children.log)", dir, err)
	}
	return filepath.Join(dir, "target", "pc-bench.jar"), ""
}

// runParallelConsumer runs the jar until ctx ends, then stops it with
// SIGTERM (it drains and commits). Its CPU time is counted in the
// samples with the child's own.
func runParallelConsumer(ctx context.Context, spec childSpec, out *childOut, rep *childReport) error {
	if spec.Jar == "" {
		return errors.New("bench: parallel consumer: no jar")
	}
	cmd := exec.Command("java", "-jar", spec.Jar,
		strings.Join(spec.Brokers, ","), spec.Topic, spec.Group, spec.SinkURL, strconv.Itoa(spec.MaxInFlight))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("bench: parallel consumer: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("bench: start parallel consumer: %w", err)
	}
	pid := cmd.Process.Pid
	ready := make(chan struct{})
	go func() {
		var once sync.Once
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == lineReady {
				once.Do(func() { close(ready) })
			}
		}
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	var mu sync.Mutex
	jvmCPU := int64(0)
	g := func(s *sample) {
		mu.Lock()
		defer mu.Unlock()
		if ns, ok := procCPU(pid); ok {
			jvmCPU = ns
		}
		s.CPU += jvmCPU
	}
	select {
	case <-ready:
	case err := <-exited:
		return fmt.Errorf("bench: parallel consumer ended before it was ready: %v", err)
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-exited
		return ctx.Err()
	}
	smp := startSampler(ctx, spec.SampleEvery, g)
	out.line(lineReady)
	var runErr error
	select {
	case <-ctx.Done():
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	case err := <-exited:
		runErr = fmt.Errorf("bench: parallel consumer ended on its own: %v", err)
	}
	// Reaped: the JVM's whole CPU time is now in RUSAGE_CHILDREN.
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru) == nil {
		mu.Lock()
		jvmCPU = max(jvmCPU, ru.Utime.Nano()+ru.Stime.Nano())
		mu.Unlock()
		rep.VmHWMKB = max(rep.VmHWMKB, ru.Maxrss)
	}
	rep.Samples = smp.wait(g)
	return runErr
}

// procCPU is the user plus system time of process pid so far.
func procCPU(pid int) (int64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// Fields after the command name, which is in parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b)[i+1:])
	if len(f) <= 12 {
		return 0, false
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return (u + s) * 1e9 / clockTick, true
}

// skipped returns the result of a contender that cannot run here, nil
// when it can.
func (h *harness) skipped(ctx context.Context, c contender, d *dataset) *runResult {
	var why string
	switch c.Mode {
	case modeParallelConsumer:
		if h.kafka.cluster != nil {
			// kafka-clients 3.7 rejects the feature ranges in kfake's
			// ApiVersions answer (min version 0) and never consumes.
			why = "skipped: the Java client refuses kfake's ApiVersions answer; run the bench on a real broker (" + kafkaBrokersEnv + ", scripts/kafka.sh start)"
			break
		}
		_, why = h.pc.build(ctx, h.logw)
	case modeWrk:
		if _, err := exec.LookPath("wrk"); err != nil {
			why = "skipped: wrk not found in PATH (apt-get install -y wrk)"
		}
	}
	if why == "" {
		return nil
	}
	return &runResult{
		Contender: c, Outcome: outcomeSkipped, Records: d.spec.Records, Notes: []string{why},
		E2EP50: notMeasured, E2EP99: notMeasured, OthersRate: notMeasured, CmdsPerRecord: notMeasured, SentPerRecord: notMeasured,
		CPUPerRecordUS: notMeasured, HeapPerHeld: notMeasured, TrackingPerGap: notMeasured,
		TrackingEncPerGap: notMeasured, OthersCPU: notMeasured,
	}
}

// peerNotes compares keyhook with the peers that ran in s (the Parallel
// Consumer: rate and CPU per record) and ceiling A with wrk's.
func peerNotes(s *scenarioResult) []string {
	ran := func(r *runResult) bool { return r != nil && r.Outcome != outcomeSkipped && r.Rate > 0 }
	var notes []string
	if kh, pc := s.run(cKey.Name), s.run(cParallel.Name); ran(kh) && ran(pc) {
		n := fmt.Sprintf("keyhook key ÷ Parallel Consumer key: %.2f× the rate (%.0f vs %.0f rec/s)", kh.Rate/pc.Rate, kh.Rate, pc.Rate)
		if kh.CPUPerRecordUS > 0 && pc.CPUPerRecordUS > 0 {
			n += fmt.Sprintf(", %.2f× the CPU per record (%.1f vs %.1f µs)", kh.CPUPerRecordUS/pc.CPUPerRecordUS, kh.CPUPerRecordUS, pc.CPUPerRecordUS)
		}
		notes = append(notes, n)
	}
	if ca, wrk := s.run(cCeilingA.Name), s.run(cWrk.Name); ran(ca) && ran(wrk) {
		notes = append(notes, fmt.Sprintf("ceiling A ÷ wrk on the same sink: %.2f× (%.0f vs %.0f rec/s); wrk sends bare bodies, unsigned, without keyhook's headers, "+
			"and its end-to-end latencies count the time a body waited for its turn", ca.Rate/wrk.Rate, ca.Rate, wrk.Rate))
	}
	return notes
}
