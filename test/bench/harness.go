package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keyhook/keyhook/internal/keyspace"
	"github.com/keyhook/keyhook/tracking"
)

// harness owns the shared parts every contender runs against.
type harness struct {
	opts  options
	kafka *kafkaEnv
	redis *redisServer
	sink  *sink
	// rdb reads INFO; sampler reads the tracking state through a client
	// whose commands are counted, so they can be taken out of the totals.
	rdb       *redis.Client
	sampler   *redis.Client
	samplerCt *countingHook
	store     *tracking.Store
	// logw receives the children's stderr.
	logw io.Writer
	// progress receives one line per step.
	progress io.Writer
	// pc is the Parallel Consumer contender's jar, built when first run.
	pc parallelBuild
}

func newHarness(ctx context.Context, opts options, logw, progress io.Writer) (*harness, error) {
	h := &harness{opts: opts, logw: logw, progress: progress}
	var err error
	if h.redis, err = startRedis(); err != nil {
		return nil, err
	}
	if h.kafka, err = startKafka(opts.kafka, opts.quick, progress); err != nil {
		h.close()
		return nil, err
	}
	if !opts.quick {
		if err := h.kafka.warmUp(ctx, progress); err != nil {
			h.close()
			return nil, err
		}
	}
	if h.sink, err = startSink(ctx); err != nil {
		h.close()
		return nil, err
	}
	h.rdb = redis.NewClient(&redis.Options{Addr: h.redis.addr})
	h.samplerCt = &countingHook{}
	h.sampler = redis.NewClient(&redis.Options{Addr: h.redis.addr, PoolSize: 1})
	h.sampler.AddHook(h.samplerCt)
	// Connect both clients now, so their connection handshakes fall
	// before any contender's first snapshot.
	if err := h.rdb.Ping(ctx).Err(); err != nil {
		h.close()
		return nil, fmt.Errorf("bench: redis: %w", err)
	}
	if err := h.sampler.Ping(ctx).Err(); err != nil {
		h.close()
		return nil, fmt.Errorf("bench: redis: %w", err)
	}
	if h.store, err = tracking.New(h.sampler, tracking.Config{}); err != nil {
		h.close()
		return nil, err
	}
	return h, nil
}

func (h *harness) close() {
	if h.sampler != nil {
		_ = h.sampler.Close()
	}
	if h.rdb != nil {
		_ = h.rdb.Close()
	}
	if h.kafka != nil {
		h.kafka.close()
	}
	if h.redis != nil {
		h.redis.stop()
	}
}

func (h *harness) logf(format string, args ...any) {
	fmt.Fprintf(h.progress, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// scenarioResult is one scenario's runs.
type scenarioResult struct {
	Scenario scenario     `json:"-"`
	ID       string       `json:"id"`
	Title    string       `json:"title"`
	Preload  float64      `json:"preload_s"`
	Runs     []*runResult `json:"runs"`
	// Stuck holds scenario 7's runs, which are of their own kind.
	Stuck *stuckResult `json:"stuck,omitempty"`
}

func (h *harness) runScenario(ctx context.Context, sc scenario) (*scenarioResult, error) {
	if len(sc.Nodes) > 0 {
		return h.runScaling(ctx, sc)
	}
	if sc.Stuck != nil {
		return h.runStuck(ctx, sc)
	}
	res := &scenarioResult{Scenario: sc, ID: sc.ID, Title: sc.Title}
	d := newDataset(sc.Data)
	h.logf("scenario %s: %s (%d records)", sc.ID, sc.Title, sc.Data.Records)
	for _, c := range sc.Contenders {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// Each contender gets the same records in a topic of its own,
		// produced just before it starts: the end-to-end latency then
		// measures how long each record of the burst waited, the same way
		// for every contender.
		if r := h.skipped(ctx, c, d); r != nil {
			h.logf("  %-24s %s", c.Name, r.Notes[0])
			res.Runs = append(res.Runs, r)
			continue
		}
		topic := fmt.Sprintf("bench-s%s-%s-%d", sc.ID, slug(c.Name), time.Now().UnixNano())
		if c.Mode != modeCeilingA && c.Mode != modeWrk {
			if err := h.kafka.createTopic(ctx, topic, sc.Partitions); err != nil {
				return nil, err
			}
			started := time.Now()
			if err := preload(ctx, h.kafka.brokers, topic, d); err != nil {
				return nil, err
			}
			res.Preload = max(res.Preload, time.Since(started).Seconds())
		}
		r, err := h.runContender(ctx, sc, d, topic, c)
		if err != nil {
			return nil, fmt.Errorf("bench: scenario %s, %s: %w", sc.ID, c.Name, err)
		}
		h.logf("  %-24s %10.0f rec/s  %s", c.Name, r.Rate, r.summary())
		res.Runs = append(res.Runs, r)
	}
	return res, nil
}

// childSpecFor is the spec of contender c in scenario sc.
func (h *harness) childSpecFor(sc scenario, topic string, c contender) childSpec {
	group := fmt.Sprintf("bench-%s-%s-%d", sc.ID, slug(c.Name), time.Now().UnixNano())
	return childSpec{
		Mode: c.Mode, Brokers: h.kafka.brokers, Topic: topic, Partitions: int(sc.Partitions),
		Group: group, RedisAddr: h.redis.addr, SinkURL: h.sink.url, Ordering: c.Ordering, Batch: c.Batch, Shared: c.Shared,
		MaxInFlight: sc.MaxInFlight, MaxWindow: h.opts.maxWindow, IdleConns: h.opts.idleConns, FlushInterval: h.opts.flushInterval, Data: sc.Data,
		RetryMaxInterval: 2 * time.Second, SampleEvery: 100 * time.Millisecond,
	}
}

// runContender runs c over the preloaded topic until it delivered what
// the scenario asks for or its cap passed.
func (h *harness) runContender(ctx context.Context, sc scenario, d *dataset, topic string, c contender) (*runResult, error) {
	spec := h.childSpecFor(sc, topic, c)
	spec.Jar = h.pc.jar
	if h.opts.profile && c.Mode == modeKeyhook {
		dir := filepath.Join(h.opts.out, "profiles")
		base := filepath.Join(dir, "s"+sc.ID+"-"+slug(c.Name))
		spec.CPUProfile, spec.AllocsProfile = base+"-cpu.pprof", base+"-allocs.pprof"
	}
	keyOrder := c.Mode == modeBaseline || c.Ordering == "key" || c.Ordering == "partition"
	run := newSinkRun(d, sc.Sink, keyOrder)
	h.sink.begin(run)
	defer h.sink.end()

	var mark redisMark
	var ts *trackSampler
	if c.Mode == modeKeyhook {
		var err error
		if mark, err = h.markRedis(ctx); err != nil {
			return nil, err
		}
		ts = startTrackSampler(ctx, h, spec.Group, topic, sc.Partitions)
	}

	cpuBefore := takeCPUSnapshot(h.redis.cmd.Process.Pid)
	ch, err := startChild(spec, h.logw)
	if err != nil {
		if ts != nil {
			ts.stop()
		}
		return nil, err
	}
	limit := sc.Cap
	if c.Serial {
		limit = sc.SlowCap
	}
	outcome := h.await(ctx, ch, run, d, sc, c, limit)
	rep, stopErr := ch.stop(30 * time.Second)
	cpuAfter := takeCPUSnapshot(h.redis.cmd.Process.Pid)
	var tsamples []trackSample
	if ts != nil {
		tsamples = ts.stop()
	}
	r := &runResult{Contender: c, Outcome: outcome, Records: d.spec.Records}
	if c.Mode == modeKeyhook {
		if err := h.countRedis(ctx, mark, r); err != nil {
			return nil, err
		}
	}
	if stopErr != nil {
		r.Notes = append(r.Notes, "child: "+stopErr.Error())
	}
	if outcome == outcomeFailed {
		r.Notes = append(r.Notes, "failed: nothing was delivered, or the child ended early (see children.log)")
	}
	r.measure(run, d, sc, rep, tsamples, limit)
	r.OthersCPU = othersShare(cpuBefore, cpuAfter)
	return r, nil
}

// Outcomes of a run.
const (
	outcomeComplete = "complete" // delivered everything asked
	outcomeCapped   = "capped"   // ran for its cap
	outcomeFailed   = "failed"   // never delivered anything
	outcomeSkipped  = "skipped"  // cannot run on this machine
)

// await waits until the run is complete, capped or failed.
func (h *harness) await(ctx context.Context, ch *child, run *sinkRun, d *dataset, sc scenario, c contender, limit time.Duration) string {
	const firstTimeout = 90 * time.Second
	started := time.Now()
	othersTotal := int64(d.spec.Records - d.specialRecords())
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	var first time.Time
	done := ch.done
	for {
		select {
		case <-ctx.Done():
			return outcomeFailed
		case <-ch.exited:
			// The child ended on its own: it failed (its report says why)
			// unless it had already delivered everything.
			if run.delivered.Load() >= int64(d.spec.Records) {
				return outcomeComplete
			}
			return outcomeFailed
		case <-done:
			if c.Mode == modeCeilingB {
				return outcomeComplete
			}
			done = nil
		case <-t.C:
		}
		if c.Mode == modeCeilingB {
			if time.Since(started) > firstTimeout+limit {
				return outcomeCapped
			}
			continue
		}
		delivered := run.delivered.Load()
		if first.IsZero() && delivered > 0 {
			first = time.Now()
		}
		switch {
		case delivered >= int64(d.spec.Records):
			return outcomeComplete
		case sc.OthersDone && run.others.Load() >= othersTotal:
			return outcomeComplete
		case first.IsZero() && time.Since(started) > firstTimeout:
			return outcomeFailed
		case !first.IsZero() && time.Since(first) >= limit:
			return outcomeCapped
		}
	}
}

// slug turns a contender name into a file- and id-safe word.
func slug(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case r == ' ' || r == '-':
			b.WriteByte('-')
		}
	}
	return strings.Trim(b.String(), "-")
}

// trackSample is the tracking state in Redis at one moment.
type trackSample struct {
	T int64 `json:"t"`
	// Bytes sums MEMORY USAGE over the partitions' tracking keys.
	Bytes int64 `json:"bytes"`
	// Gaps counts the acked ranges above the watermark (each follows a
	// run of unacked offsets); AckedBytes is their stored encoding.
	Gaps       int64 `json:"gaps"`
	AckedBytes int64 `json:"acked_bytes"`
}

// trackSampler reads the tracking state of one subscription every half
// second while a keyhook contender runs.
type trackSampler struct {
	cancel  context.CancelFunc
	done    chan struct{}
	samples []trackSample
}

func startTrackSampler(ctx context.Context, h *harness, sub, topic string, partitions int32) *trackSampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &trackSampler{cancel: cancel, done: make(chan struct{})}
	pks := make([]tracking.PartitionKey, partitions)
	keys := make([]string, partitions)
	for p := range partitions {
		pks[p] = tracking.PartitionKey{Subscription: sub, Topic: topic, Partition: p}
		keys[p] = keyspace.Keyspace{}.Partition(sub, topic, p)
	}
	go func() {
		defer close(s.done)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			states, err := h.store.Load(ctx, pks)
			if err != nil || len(states) == 0 {
				continue
			}
			ts := trackSample{T: time.Now().UnixNano()}
			for _, st := range states {
				ts.Gaps += int64(len(st.AckedRanges))
				ts.AckedBytes += int64(len(st.Acked.AppendBinary(nil)))
			}
			for _, k := range keys {
				n, err := h.sampler.MemoryUsage(ctx, k, 0).Result()
				if err == nil {
					ts.Bytes += n
				}
			}
			s.samples = append(s.samples, ts)
		}
	}()
	return s
}

func (s *trackSampler) stop() []trackSample {
	s.cancel()
	<-s.done
	return s.samples
}
