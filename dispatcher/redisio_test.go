package dispatcher_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/keyhook/keyhook/connect"
	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
)

// produceSteadily writes perSecond records a second, round robin over the
// topic's partitions with 10 keys each, until the returned stop is
// called; stop returns each partition's end offset.
func produceSteadily(t *testing.T, brokers []string, topic string, partitions int32, perSecond int) (stop func() map[int32]int64) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ends := make(map[int32]int64)
	var firstErr error
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		i := 0
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for range perSecond / 100 {
				p := int32(i) % partitions
				rec := &kgo.Record{Topic: topic, Partition: p, Key: fmt.Appendf(nil, "k%d", i%(10*int(partitions))),
					Value: fmt.Appendf(nil, "record-%d", i)}
				i++
				cl.Produce(context.Background(), rec, func(r *kgo.Record, err error) {
					mu.Lock()
					defer mu.Unlock()
					if err != nil && firstErr == nil {
						firstErr = err
					}
					if err == nil && r.Offset+1 > ends[r.Partition] {
						ends[r.Partition] = r.Offset + 1
					}
				})
			}
		}
	}()
	var once sync.Once
	stop = func() map[int32]int64 {
		once.Do(func() {
			cancel()
			<-done
			if err := cl.Flush(context.Background()); err != nil {
				t.Errorf("produce flush: %v", err)
			}
			cl.Close()
		})
		mu.Lock()
		defer mu.Unlock()
		if firstErr != nil {
			t.Fatalf("produce: %v", firstErr)
		}
		out := make(map[int32]int64, len(ends))
		for p, e := range ends {
			out[p] = e
		}
		return out
	}
	t.Cleanup(func() { stop() })
	return stop
}

// perSecond is n events over d, as a rate.
func perSecond(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }

// While Redis hangs, for less than the ownership lease (the session
// timeout less a heartbeat interval, 4.8 s here), deliveries go on at the
// rate they had: flushes wait off the partitions' loops. The commit stays
// where the last successful flush put it, and catches up once Redis
// answers again.
func TestHungRedisDoesNotStopDeliveries(t *testing.T) {
	const topic, partitions = "hung", 4
	brokers := testutil.Kfake(t, partitions, topic)
	srv := testutil.StartRedis(t)
	sink := testutil.StartSink(t)
	sub := newSub("hung", topic, sink.URL, subscription.OrderKey, 16)
	startNode(t, brokers, srv.Client(), []*subscription.Subscription{sub}, nil)
	adm := testutil.Admin(t, brokers)
	stop := produceSteadily(t, brokers, topic, partitions, 500)
	sink.WaitAcked(t, 200, 20*time.Second)

	const window = 2 * time.Second
	from := time.Now()
	time.Sleep(window)
	before := perSecond(sink.CompletedSince(from), time.Since(from))

	srv.Pause()
	pausedAt := time.Now()
	// What was flushed before the pause is committed by now.
	time.Sleep(500 * time.Millisecond)
	atPause, err := testutil.Committed(context.Background(), adm, sub.GroupID())
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(4*time.Second - time.Since(pausedAt))
	during := perSecond(sink.CompletedSince(pausedAt), time.Since(pausedAt))
	inHang, err := testutil.Committed(context.Background(), adm, sub.GroupID())
	if err != nil {
		t.Fatal(err)
	}
	srv.Continue()
	t.Logf("deliveries: %.0f/s before the hang, %.0f/s during the 4 s hang", before, during)

	for p, o := range inHang {
		if o != atPause[p] {
			t.Errorf("partition %d: commit moved from %d to %d while Redis hung; it must not pass the last flush", p, atPause[p], o)
		}
	}
	if during < before/2 {
		t.Errorf("deliveries fell from %.0f/s to %.0f/s while Redis hung; want them to go on", before, during)
	}
	ends := stop()
	testutil.WaitCommitted(t, adm, sub.GroupID(), ends, 30*time.Second)
	checkDelivered(t, sink, topic, ends)
}

// A node that cannot confirm its claims for the ownership lease starts no
// delivery, neither a first attempt nor a retry, until the tracker
// confirms them again: Redis hangs past the lease, so the node cannot
// know whether a frozen stretch cost it its partitions. Deliveries go on
// within the lease and resume, losing nothing, once Redis answers.
func TestNoDeliveryStartsOnceTheOwnershipLeaseRunsOut(t *testing.T) {
	const topic, partitions = "lease", 2
	const lease = testLease
	brokers := testutil.Kfake(t, partitions, topic)
	srv := testutil.StartRedis(t)
	sink := testutil.StartSink(t)
	// One key fails until the end, so a retry waits at every moment.
	var failing atomic.Bool
	failing.Store(true)
	sink.Status = func(d *testutil.Delivery) int {
		if d.Key == "k3" && failing.Load() {
			return 503
		}
		return 200
	}
	sub := newSub("lease", topic, sink.URL, subscription.OrderKey, 16)
	startNode(t, brokers, srv.Client(), []*subscription.Subscription{sub}, nil)
	adm := testutil.Admin(t, brokers)
	stop := produceSteadily(t, brokers, topic, partitions, 200)
	sink.WaitAcked(t, 100, 20*time.Second)

	srv.Pause()
	pausedAt := time.Now()
	// Every write the node sent before the pause was confirmed by then at
	// the latest, so the lease ends by pausedAt+lease. What passed the
	// pool's check just before may still reach the sink a moment later,
	// later still on a loaded machine under -race.
	const slack = 300 * time.Millisecond
	time.Sleep(lease + 2*time.Second)
	within, retriesWithin, after := startsAround(sink, pausedAt, 2*time.Second, lease-slack, lease+slack)
	srv.Continue()
	failing.Store(false)
	t.Logf("requests started while Redis hung: %d (%d retries) from 2 s to the lease's end, %d after it", within, retriesWithin, len(after))
	if within == 0 || retriesWithin == 0 {
		t.Errorf("%d requests (%d retries) started within the lease while Redis hung; want deliveries and retries to go on", within, retriesWithin)
	}
	if len(after) > 0 {
		t.Errorf("%d requests started after the ownership lease ran out; first: %v", len(after), after[:min(len(after), 5)])
	}

	ends := stop()
	testutil.WaitCommitted(t, adm, sub.GroupID(), ends, 30*time.Second)
	checkDelivered(t, sink, topic, ends)
}

// An idle partition renews its ownership lease, so its next record goes at
// once rather than waiting for a write to confirm the claim; a Redis that
// hangs past the lease shows in keyhook.partitions.unconfirmed until it
// answers again.
func TestIdlePartitionKeepsItsLease(t *testing.T) {
	const topic = "idle"
	const lease = testLease
	brokers := testutil.Kfake(t, 1, topic)
	srv := testutil.StartRedis(t)
	sink := testutil.StartSink(t)
	reader := sdkmetric.NewManualReader()
	sub := newSub("idle", topic, sink.URL, subscription.OrderKey, 4)
	startNode(t, brokers, srv.Client(), []*subscription.Subscription{sub}, func(c *dispatcher.Config) {
		c.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	})
	unconfirmed := func() int64 { return testutil.Int64Metric(t, reader, "keyhook.partitions.unconfirmed") }
	keyOf := func(i int) string { return fmt.Sprintf("k%d", i) }
	produce(t, brokers, topic, 5, keyOf, func(int) int32 { return 0 })
	sink.WaitAcked(t, 5, 20*time.Second)

	time.Sleep(lease + time.Second)
	if n := unconfirmed(); n != 0 {
		t.Errorf("%d partitions unconfirmed after %v idle with Redis up; want the idle partition to renew its lease", n, lease+time.Second)
	}

	srv.Pause()
	time.Sleep(lease + 500*time.Millisecond)
	if n := unconfirmed(); n != 1 {
		t.Errorf("%d partitions unconfirmed %v into a Redis hang; want 1", n, lease+500*time.Millisecond)
	}
	srv.Continue()
	testutil.WaitFor(t, 10*time.Second, "the partition's lease confirmed again once Redis answers", func() bool { return unconfirmed() == 0 })
	produce(t, brokers, topic, 5, keyOf, func(int) int32 { return 0 })
	sink.WaitAcked(t, 10, 20*time.Second)
}

// A node handing over its partitions while Redis hangs waits one flush
// deadline for all of them, not one per partition for each flush and
// release.
func TestShutdownWithRedisHungTakesOneFlushDeadline(t *testing.T) {
	const topic, partitions = "hung-stop", 8
	brokers := testutil.Kfake(t, partitions, topic)
	srv := testutil.StartRedis(t)
	sink := testutil.StartSink(t)
	sub := newSub("hung-stop", topic, sink.URL, subscription.OrderKey, 8)
	produce(t, brokers, topic, 800, func(i int) string { return fmt.Sprintf("k%d", i%40) }, func(i int) int32 { return int32(i % partitions) })
	// The client as keyhook builds it: its calls end at their context's
	// deadline.
	rdb, err := connect.NewRedis(connect.RedisConfig{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	h := startNode(t, brokers, rdb, []*subscription.Subscription{sub}, nil)
	sink.WaitAcked(t, 800, 30*time.Second)

	srv.Pause()
	started := time.Now()
	h.stop(t)
	took := time.Since(started)
	t.Logf("node with %d partitions stopped in %v with Redis hung", partitions, took.Round(10*time.Millisecond))
	// One 2 s flush deadline shared by the final flush and the release;
	// the rest is leaving the group.
	if limit := 4 * time.Second; took > limit {
		t.Errorf("stop took %v with Redis hung; want at most %v (one flush deadline)", took, limit)
	}
}

// scriptCounter counts the script calls a Redis client sends, alone or
// pipelined, by the partitions (keys) they write, and the largest
// pipeline.
type scriptCounter struct {
	mu sync.Mutex
	scriptCounts
}

type scriptCounts struct {
	single    int // partitions written by script calls sent alone
	piped     int // partitions written by script calls sent in pipelines
	pipelines int // pipelines holding script calls
	largest   int // partitions written by the largest pipeline
	scripts   int // script calls sent in pipelines
	commands  int // every command, for commands per record
}

// scriptKeys is the number of keys of a script call (EVAL/EVALSHA script
// numkeys key...), 0 for any other command: a flush round writes as many
// partitions as it names keys.
func scriptKeys(c redis.Cmder) int {
	if n := strings.ToLower(c.Name()); n != "evalsha" && n != "eval" {
		return 0
	}
	keys, _ := c.Args()[2].(int)
	return keys
}

func (s *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.mu.Lock()
		s.commands++
		s.single += scriptKeys(cmd)
		s.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (s *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n, scripts := 0, 0
		for _, c := range cmds {
			if k := scriptKeys(c); k > 0 {
				n += k
				scripts++
			}
		}
		s.mu.Lock()
		s.commands += len(cmds)
		s.scripts += scripts
		if n > 0 {
			s.pipelines++
			s.piped += n
			s.largest = max(s.largest, n)
		}
		s.mu.Unlock()
		return next(ctx, cmds)
	}
}

// take returns the counts so far and starts again from zero.
func (s *scriptCounter) take() scriptCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.scriptCounts
	s.scriptCounts = scriptCounts{}
	return out
}

// Under load every partition is dirty at every tick; a tick writes all of
// them in one round trip, not one per partition, and on a single Redis in
// one script call.
func TestOneTickFlushesEveryDirtyPartitionInOnePipeline(t *testing.T) {
	const topic, partitions = "pipelined", 8
	brokers := testutil.Kfake(t, partitions, topic)
	rdb := testutil.StartRedis(t).Client()
	counter := &scriptCounter{}
	rdb.AddHook(counter)
	sink := testutil.StartSink(t)
	sub := newSub("pipelined", topic, sink.URL, subscription.OrderKey, 16)
	const flushInterval = 20 * time.Millisecond
	startNode(t, brokers, rdb, []*subscription.Subscription{sub}, nil)
	produceSteadily(t, brokers, topic, partitions, 800)
	sink.WaitAcked(t, 400, 20*time.Second)

	counter.take()
	acked := sink.AckedCount()
	from := time.Now()
	time.Sleep(2 * time.Second)
	got := counter.take()
	took := time.Since(from)
	records := sink.AckedCount() - acked
	ticks := int(took / flushInterval)
	t.Logf("over %v: %d records, %d pipelines of %d script calls writing %d partitions (largest %d), %d flushes alone; %d Redis commands, %.3f per record",
		took.Round(time.Millisecond), records, got.pipelines, got.scripts, got.piped, got.largest, got.single, got.commands,
		float64(got.commands)/float64(max(records, 1)))
	if got.single != 0 {
		t.Errorf("%d flushes went alone; want every flush in a tick's pipeline", got.single)
	}
	if got.largest != partitions {
		t.Errorf("largest pipeline held %d flushes; want all %d partitions in one", got.largest, partitions)
	}
	if got.scripts != got.pipelines {
		t.Errorf("%d script calls in %d pipelines; want one call per tick on a single Redis", got.scripts, got.pipelines)
	}
	if got.pipelines > ticks+ticks/5 {
		t.Errorf("%d pipelines in %d ticks; want at most one per tick", got.pipelines, ticks)
	}
}
