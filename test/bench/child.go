package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// childEnv carries a child's spec (JSON); its presence makes the bench
// binary (or the test binary) run one contender instead of the harness.
const childEnv = "KEYHOOK_BENCH_CHILD"

// Contender modes a child runs.
const (
	modeBaseline = "baseline"
	modeKeyhook  = "keyhook"
	modeCeilingA = "ceiling-a"
	modeCeilingB = "ceiling-b"
)

// childSpec tells a child what to run.
type childSpec struct {
	Mode       string   `json:"mode"`
	Brokers    []string `json:"brokers"`
	Topic      string   `json:"topic"`
	Partitions int      `json:"partitions"`
	// Group is the consumer group (baseline, ceiling B) or the
	// subscription id (keyhook).
	Group string `json:"group"`
	// NodeID names a keyhook node; default "bench-<group>". Nodes sharing
	// one subscription need names of their own.
	NodeID    string `json:"node_id,omitempty"`
	RedisAddr string `json:"redis_addr,omitempty"`
	SinkURL   string `json:"sink_url,omitempty"`
	Ordering  string `json:"ordering,omitempty"`
	// Batch, above 1, is the subscription's batch.max_records.
	Batch int `json:"batch,omitempty"`
	// Shared runs keyhook with the shared read.
	Shared      bool  `json:"shared,omitempty"`
	MaxInFlight int   `json:"max_in_flight"`
	MaxWindow   int64 `json:"max_window,omitempty"`
	// FlushInterval is keyhook's tracking flush interval, 0 its default.
	FlushInterval time.Duration `json:"flush_interval,omitempty"`
	// IdleConns is the webhooks client's MaxIdleConnsPerHost, 0 its
	// default (what cmd/keyhook uses).
	IdleConns int      `json:"idle_conns,omitempty"`
	Data      dataSpec `json:"data"`
	// RetryMaxInterval caps the wait between attempts, so a record that
	// recovers is retried soon after.
	RetryMaxInterval time.Duration `json:"retry_max_interval"`
	SampleEvery      time.Duration `json:"sample_every"`
	// CPUProfile and AllocsProfile, when set, are where the child writes
	// its pprof CPU profile and allocation profile.
	CPUProfile    string `json:"cpu_profile,omitempty"`
	AllocsProfile string `json:"allocs_profile,omitempty"`
	// Jar is the Parallel Consumer contender's jar.
	Jar string `json:"jar,omitempty"`
}

// sample is a child's state at one moment.
type sample struct {
	T        int64  `json:"t"`   // unix ns
	CPU      int64  `json:"cpu"` // user+system ns of the process so far
	HeapLive uint64 `json:"heap_live"`
	// For keyhook, from its own metrics: fetched records not acked, in
	// flight deliveries, the largest partition window in use and the
	// paused partitions.
	Pending     int64 `json:"pending,omitempty"`
	InFlight    int64 `json:"in_flight,omitempty"`
	MaxDistance int64 `json:"max_distance,omitempty"`
	Paused      int64 `json:"paused,omitempty"`
	// Held counts the records keyhook holds in memory: fetched and not
	// yet delivered or dead-lettered, whether dispatched, queued on a
	// lane or waiting for room in the window.
	Held int64 `json:"held,omitempty"`
	// Attempts and AttemptErrors count HTTP attempts so far, and those
	// that got no answer (connection errors, timeouts).
	Attempts      int64 `json:"attempts,omitempty"`
	AttemptErrors int64 `json:"attempt_errors,omitempty"`
	// Consumed counts the records a consumer read (ceiling B).
	Consumed int64 `json:"consumed,omitempty"`
	// KeyHashes sums the key hashes keyhook delivers over its partitions
	// (keyhook.partition.key_hashes; 65,536 per whole partition), and
	// NotOwned counts the records it read and left to another sharer
	// (keyhook.records.not_owned).
	KeyHashes int64 `json:"key_hashes,omitempty"`
	NotOwned  int64 `json:"not_owned,omitempty"`
	// Parked counts the records keyhook parked by offset, to be read
	// again from Kafka (keyhook.records.parked), and Reread those it read
	// again (keyhook.records.reread); the Seen flags tell a zero from a
	// node that does not publish them.
	Parked     int64 `json:"parked,omitempty"`
	ParkedSeen bool  `json:"parked_seen,omitempty"`
	Reread     int64 `json:"reread,omitempty"`
	RereadSeen bool  `json:"reread_seen,omitempty"`
}

// childReport is what a child prints when it ends.
type childReport struct {
	Mode    string   `json:"mode"`
	Samples []sample `json:"samples"`
	// IdleHeapLive is the live heap after a GC, before any record.
	IdleHeapLive uint64 `json:"idle_heap_live"`
	VmHWMKB      int64  `json:"vm_hwm_kb"`
	CPUTotal     int64  `json:"cpu_total"`
	// Consumed, FirstAt and LastAt: ceiling B's count, the unix ns of
	// its first fetch request and of its last record read.
	Consumed int64 `json:"consumed,omitempty"`
	FirstAt  int64 `json:"first_at,omitempty"`
	LastAt   int64 `json:"last_at,omitempty"`
	// PartitionWindow is the largest window each partition used.
	PartitionWindow map[string]int64 `json:"partition_window,omitempty"`
	// RedisSent counts the commands keyhook's Redis client sent over the
	// node's life (keyhook.redis.commands): each pipelined command and
	// each script call once.
	RedisSent int64  `json:"redis_sent,omitempty"`
	Err       string `json:"err,omitempty"`
}

// Lines a child prints on stdout; everything else goes to stderr.
const (
	lineReady  = "ready"
	lineDone   = "done"
	lineReport = "report "
)

// gauges reads a contender's own counters for a sample.
type gauges func(s *sample)

// childMain runs the contender described by the childEnv variable and
// returns the process exit code.
func childMain(specJSON string) int {
	var spec childSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "bench child: spec: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	out := &childOut{w: os.Stdout}
	rep, err := runChild(ctx, spec, out)
	if err != nil {
		rep.Err = err.Error()
	}
	b, _ := json.Marshal(rep)
	out.line(lineReport + string(b))
	if err != nil {
		return 1
	}
	return 0
}

// childOut serialises the lines a child prints.
type childOut struct {
	mu sync.Mutex
	w  io.Writer
}

func (o *childOut) line(s string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	fmt.Fprintln(o.w, s)
}

func runChild(ctx context.Context, spec childSpec, out *childOut) (childReport, error) {
	rep := childReport{Mode: spec.Mode}
	if spec.CPUProfile != "" {
		f, err := os.Create(spec.CPUProfile)
		if err != nil {
			return rep, fmt.Errorf("bench child: cpu profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return rep, fmt.Errorf("bench child: cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	runtime.GC()
	rep.IdleHeapLive = heapLive()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	var err error
	switch spec.Mode {
	case modeKeyhook:
		err = runKeyhook(ctx, spec, log, out, &rep)
	case modeBaseline:
		err = runBaseline(ctx, spec, out, &rep)
	case modeCeilingA:
		err = runCeilingA(ctx, spec, out, &rep)
	case modeCeilingB:
		err = runCeilingB(ctx, spec, out, &rep)
	case modeParallelConsumer:
		err = runParallelConsumer(ctx, spec, out, &rep)
	case modeWrk:
		err = runWrk(ctx, spec, out, &rep)
	default:
		err = fmt.Errorf("bench child: unknown mode %q", spec.Mode)
	}
	rep.CPUTotal = cpuNanos()
	rep.VmHWMKB = max(rep.VmHWMKB, vmHWM()) // a contender may report its JVM's
	if spec.AllocsProfile != "" {
		if f, ferr := os.Create(spec.AllocsProfile); ferr == nil {
			_ = pprof.Lookup("allocs").WriteTo(f, 0)
			_ = f.Close()
		}
	}
	return rep, err
}

// sampler takes a sample every interval until ctx ends, then returns
// them; it is the only writer of its slice.
type sampler struct {
	done    chan struct{}
	samples []sample
}

func startSampler(ctx context.Context, every time.Duration, g gauges) *sampler {
	s := &sampler{done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			s.take(g)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *sampler) take(g gauges) {
	sm := sample{T: time.Now().UnixNano(), CPU: cpuNanos(), HeapLive: heapLive()}
	if g != nil {
		g(&sm)
	}
	s.samples = append(s.samples, sm)
}

// wait returns the samples once the sampler stopped, with a last one.
func (s *sampler) wait(g gauges) []sample {
	<-s.done
	s.take(g)
	return s.samples
}

// cpuNanos is the process's user plus system time.
func cpuNanos() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// heapLive is the heap marked live by the last GC.
func heapLive() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// vmHWM is the process's peak resident set, in KiB.
func vmHWM() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// child is a running contender process, seen from the harness.
type child struct {
	cmd   *exec.Cmd
	ready chan struct{}
	done  chan struct{}
	// exited closes when the child's stdout closes: it ended or is
	// about to.
	exited chan struct{}
	report chan childReport
	waited chan error
}

// startChild re-executes this binary as a contender. Its stderr goes to
// logw.
func startChild(spec childSpec, logw io.Writer) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("bench: own executable: %w", err)
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("bench: child spec: %w", err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(b))
	cmd.Stderr = logw
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("bench: child stdout: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start child %s: %w", spec.Mode, err)
	}
	c := &child{
		cmd: cmd, ready: make(chan struct{}), done: make(chan struct{}), exited: make(chan struct{}),
		report: make(chan childReport, 1), waited: make(chan error, 1),
	}
	go c.read(stdout)
	return c, nil
}

// read follows the child's stdout until it closes, then reaps the child.
func (c *child) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 256<<20)
	var readyOnce, doneOnce sync.Once
	gotReport := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == lineReady:
			readyOnce.Do(func() { close(c.ready) })
		case line == lineDone:
			doneOnce.Do(func() { close(c.done) })
		case strings.HasPrefix(line, lineReport):
			var rep childReport
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, lineReport)), &rep); err != nil {
				rep.Err = "bench: child report: " + err.Error()
			}
			if !gotReport {
				gotReport = true
				c.report <- rep
			}
		}
	}
	close(c.exited)
	if !gotReport {
		c.report <- childReport{Err: "bench: child ended without a report"}
	}
	c.waited <- c.cmd.Wait()
}

// stop asks the child to finish (SIGTERM: drain, flush, commit, report)
// and returns its report; a child that does not end within grace is
// killed.
func (c *child) stop(grace time.Duration) (childReport, error) {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case rep := <-c.report:
		werr := <-c.waited
		if rep.Err != "" {
			return rep, errors.New(rep.Err)
		}
		var ee *exec.ExitError
		if werr != nil && !errors.As(werr, &ee) {
			return rep, fmt.Errorf("bench: child: %w", werr)
		}
		return rep, nil
	case <-t.C:
		_ = c.cmd.Process.Kill()
		<-c.report
		<-c.waited
		return childReport{}, fmt.Errorf("bench: child did not stop within %v; killed", grace)
	}
}
