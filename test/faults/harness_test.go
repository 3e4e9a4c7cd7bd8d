package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/internal/verify"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
)

// Settings shared by every scenario on the real broker.
const (
	// faultPartitions is the partition count of a scenario's topic unless
	// it asks for another: more partitions than nodes, so each rebalance
	// moves some of them.
	faultPartitions = 12
	// faultSession is the nodes' consumer group session timeout, the
	// shortest a real broker accepts by default (group.min.session.timeout.ms).
	faultSession = 6 * time.Second
	// faultCommitInterval commits often so the sampler sees many commits.
	faultCommitInterval = 200 * time.Millisecond
	// unflushedWindow over-approximates the acks a dead node had not yet
	// written to Redis: its flush interval is 20ms, five times less.
	unflushedWindow = 100 * time.Millisecond
	// settleTimeout bounds the wait, after a scenario's faults, until every
	// record is acked and committed.
	settleTimeout = 4 * time.Minute

	// seedEnv, when set, seeds the scenarios' random choices (which node
	// dies, which partition goes zombie) to replay a logged run.
	seedEnv = "KEYHOOK_FAULTS_SEED"
	// keepLogsEnv, when set, keeps the node logs of passing scenarios too.
	keepLogsEnv = "KEYHOOK_FAULTS_KEEP_LOGS"
)

// clusterConfig describes a scenario's cluster. Zero fields take the
// defaults named in their comments.
type clusterConfig struct {
	// nodes is how many keyhook processes start (default 3).
	nodes int
	// partitions is the topic's partition count (default faultPartitions).
	partitions int
	// brokers is the Kafka to use; default the shared real broker
	// (testutil.RealKafka). Tests that restart the broker pass their own.
	brokers []string
	// keys is how many distinct record keys the producer cycles through
	// (default 600, about 50 per partition).
	keys int
	// key, when set, names record seq's key instead of "key-<seq mod
	// keys>": a scenario that needs a few keys heavier than the rest.
	key func(seq int64) string
	// subscriptions is how many subscriptions read the topic (default 1),
	// each with a sink, a group and a bound of its own, verified apart:
	// with the shared read they are cursors over one read.
	subscriptions int
	// maxInFlight is each subscription's MaxInFlight (default 64).
	maxInFlight int
	// latency and status configure the sink; they are set before the sink
	// serves and must be safe for concurrent use (read shared state through
	// atomics).
	latency    func(*testutil.Delivery) time.Duration
	status     func(*testutil.Delivery) int
	retryAfter func(*testutil.Delivery) int
	// retry is the subscription's retry policy (default keyhook's).
	retry subscription.RetryPolicy
	// flags are more flags every node is started with.
	flags []string
	// unflushed is how long before a node's failure an ack may not be in
	// Redis yet, counted into each subscription's bound (default
	// unflushedWindow).
	unflushed time.Duration
}

// cluster is one scenario's world: N keyhook processes sharing one real
// Redis, and one or more subscriptions, each with a sink of its own, on a
// topic of the scenario's own, on a real Kafka broker. It owns a commit
// sampler and an in-flight monitor that run for the whole scenario.
type cluster struct {
	t       *testing.T
	name    string
	started time.Time
	cfg     clusterConfig
	rng     *rand.Rand

	brokers []string
	topic   string
	dlq     string
	redis   *testutil.Redis
	rdb     *redis.Client
	tracker *tracking.Store
	// subs and sinks are the scenario's subscriptions and their sinks, in
	// the same order; sub and sink are the first of them, which scenarios
	// of one subscription use.
	subs  []*subscription.Subscription
	sinks []*testutil.Sink
	sub   *subscription.Subscription
	sink  *testutil.Sink
	adm   *kadm.Client
	flags []string
	// sockets resolves, for every sink, which node opened a connection.
	sockets testutil.SocketOwners

	// slots holds the current process of each node slot; incarnation
	// counts its restarts so every process gets a name of its own.
	slots       []*testutil.Process
	incarnation []int
	// extra are flags of a slot's own, after the common ones (a node
	// that reaches Kafka or Redis through a proxy).
	extra [][]string
	// every process ever started, for the logs kept on failure.
	procs []*testutil.Process

	samplers *verify.CommitSamplers
	// sampler is the first subscription's; the monitor watches its sink.
	sampler  *verify.CommitSampler
	inflight *inflightMonitor
	bg       sync.WaitGroup
	stopBG   context.CancelFunc

	mu sync.Mutex
	// failed names the processes killed or stopped: the verifier counts
	// their requests' overlaps as redeliveries after a failure.
	failed map[string]bool
	// expected are the sequence numbers producers got acknowledged as
	// committed data: the log must hold exactly these.
	expected map[int64]bool
	// bounds are the duplicates the scenario's failures allow each
	// subscription, in the order of subs.
	bounds     []int
	boundNotes []string
}

// newCluster creates the topic (cfg.partitions) and its dead-letter topic,
// starts Redis and the sink, stores the subscription, and starts the commit
// sampler and the in-flight monitor. Nodes start with startNodes.
func newCluster(t *testing.T, name string, cfg clusterConfig) *cluster {
	t.Helper()
	if cfg.nodes == 0 {
		cfg.nodes = 3
	}
	if cfg.keys == 0 {
		cfg.keys = 600
	}
	if cfg.partitions == 0 {
		cfg.partitions = faultPartitions
	}
	if cfg.subscriptions == 0 {
		cfg.subscriptions = 1
	}
	if cfg.unflushed == 0 {
		cfg.unflushed = unflushedWindow
	}
	if cfg.maxInFlight == 0 {
		cfg.maxInFlight = 64
	}
	brokers := cfg.brokers
	if brokers == nil {
		brokers = testutil.RealKafka(t)
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(seedEnv); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", seedEnv, s, err)
		}
		seed = v
	}
	c := &cluster{
		t: t, name: name, started: time.Now(), cfg: cfg,
		rng:      rand.New(rand.NewPCG(seed, seed>>1)),
		brokers:  brokers,
		topic:    fmt.Sprintf("faults-%s-%d", name, time.Now().UnixNano()),
		expected: make(map[int64]bool),
		failed:   make(map[string]bool),
		bounds:   make([]int, cfg.subscriptions),
	}
	t.Logf("scenario %s: topic %s, random seed %d (%s replays its choices)", name, c.topic, seed, seedEnv)
	c.dlq = c.topic + ".keyhook.dlq"
	testutil.CreateTopics(t, brokers, int32(cfg.partitions), c.topic)
	// The dead-letter topic is created up front, as an operator must:
	// keyhook's client does not ask the broker to auto-create topics, so a
	// missing dead-letter topic blocks its record's key (every write fails
	// with UNKNOWN_TOPIC_OR_PARTITION and is retried).
	testutil.CreateTopics(t, brokers, 1, c.dlq)

	c.redis = testutil.StartRedis(t)
	c.rdb = c.redis.Client()
	tr, err := tracking.New(c.rdb, tracking.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c.tracker = tr
	c.keepLogsOnFailure()

	subs, err := subscription.New(c.rdb, subscription.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range cfg.subscriptions {
		sink := testutil.StartSink(t)
		sink.Latency = cfg.latency
		sink.Status = cfg.status
		sink.RetryAfter = cfg.retryAfter
		sink.SetOrigin(c.origin)
		sub := &subscription.Subscription{
			Name:        name,
			Topics:      []string{c.topic},
			Endpoint:    subscription.Endpoint{URL: sink.URL},
			MaxInFlight: cfg.maxInFlight,
			Ordering:    subscription.OrderKey,
			Retry:       cfg.retry,
		}
		if cfg.subscriptions > 1 {
			sub.Name = fmt.Sprintf("%s-%d", name, i)
		}
		if err := subs.Create(context.Background(), sub); err != nil {
			t.Fatalf("create subscription: %v", err)
		}
		c.subs = append(c.subs, sub)
		c.sinks = append(c.sinks, sink)
	}
	c.sub, c.sink = c.subs[0], c.sinks[0]
	c.adm = kadm.NewClient(newClient(t, brokers))
	c.flags = []string{
		"--kafka-brokers", strings.Join(brokers, ","),
		"--redis-url", c.redis.URL(),
		"--session-timeout", faultSession.String(),
		"--commit-interval", faultCommitInterval.String(),
		// The scenario's own config topic: nodes of other scenarios on the
		// shared broker must not restore its subscription, nor it theirs.
		"--config-topic", c.topic + ".config",
		// The model with a consumer group per subscription, which
		// --shared-read=false keeps, is what most scenarios defend; the
		// shared read's own scenarios turn it back on (sharedRead: the
		// last --shared-read wins).
		"--shared-read=false",
	}
	c.flags = append(c.flags, cfg.flags...)

	ctx, cancel := context.WithCancel(context.Background())
	c.stopBG = cancel
	t.Cleanup(c.stopBackground)
	groups := make([]string, len(c.subs))
	for i, sub := range c.subs {
		groups[i] = sub.GroupID()
	}
	c.samplers = verify.NewCommitSamplers(c.adm, groups, c.topic, int32(cfg.partitions))
	c.sampler = c.samplers.For(c.sub.GroupID())
	c.inflight = &inflightMonitor{sink: c.sink}
	c.bg.Add(2)
	go func() {
		defer c.bg.Done()
		c.samplers.Run(ctx)
	}()
	go func() {
		defer c.bg.Done()
		c.inflight.run(ctx)
	}()
	return c
}

func (c *cluster) stopBackground() {
	c.stopBG()
	c.bg.Wait()
}

// keepLogsOnFailure copies every node's log out of the test's temp dir
// when the test fails (always with keepLogsEnv set), since the temp dir is
// removed after it. It is
// registered after StartRedis made the temp dir, so it runs before the
// removal and after the nodes were killed.
func (c *cluster) keepLogsOnFailure() {
	c.t.Cleanup(func() {
		if !c.t.Failed() && os.Getenv(keepLogsEnv) == "" {
			return
		}
		dir, err := os.MkdirTemp("", "keyhook-faults-"+c.name+"-")
		if err != nil {
			c.t.Logf("keep logs: %v", err)
			return
		}
		for _, p := range c.procs {
			if data, err := os.ReadFile(p.LogPath); err == nil {
				_ = os.WriteFile(filepath.Join(dir, p.Name+".log"), data, 0o600)
			}
		}
		c.t.Logf("node logs kept in %s", dir)
	})
}

// startNodes starts cfg.nodes keyhook processes, one per slot.
func (c *cluster) startNodes() {
	c.t.Helper()
	for range c.cfg.nodes {
		c.addNode()
	}
}

// addNode starts a process in a new slot and returns the slot; extra
// flags override the common ones, in this slot only.
func (c *cluster) addNode(extra ...string) int {
	c.t.Helper()
	c.slots = append(c.slots, nil)
	c.incarnation = append(c.incarnation, 0)
	c.extra = append(c.extra, extra)
	slot := len(c.slots) - 1
	c.startSlot(slot)
	return slot
}

// startSlot starts a new process in slot (its previous one must be gone).
func (c *cluster) startSlot(slot int) {
	c.t.Helper()
	c.incarnation[slot]++
	name := fmt.Sprintf("node%d-%d", slot, c.incarnation[slot])
	p := testutil.StartKeyhook(c.t, name, append(slices.Clone(c.flags), c.extra[slot]...)...)
	c.slots[slot] = p
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
}

// origin names the process that opened a connection to the sink (the
// sink's origin resolver): the requests do not say which node sent them.
func (c *cluster) origin(client, server net.Addr) string {
	c.mu.Lock()
	procs := slices.Clone(c.procs)
	c.mu.Unlock()
	pids := make([]int, 0, len(procs))
	for _, p := range procs {
		if !p.Exited() {
			pids = append(pids, p.Pid())
		}
	}
	pid, ok := c.sockets.Lookup(client, server, pids)
	if !ok {
		return goneOrigin
	}
	for _, p := range procs {
		if p.Pid() == pid {
			return p.Name
		}
	}
	return goneOrigin
}

// goneOrigin names the sender of a connection whose socket no process
// held any more when the sink accepted it: a node killed just after it
// connected (a node that exits gracefully drains its requests first).
const goneOrigin = "a node gone before its connection was accepted"

// markFailed records that p was killed or stopped.
func (c *cluster) markFailed(p *testutil.Process) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failed[p.Name] = true
	c.failed[goneOrigin] = true
}

// live returns the slots whose process runs.
func (c *cluster) live() []int {
	var out []int
	for i, p := range c.slots {
		if p != nil && !p.Exited() {
			out = append(out, i)
		}
	}
	return out
}

// kill ends slot's process with SIGKILL and adds the duplicates the kill
// may cause to each subscription's bound: its sink's in-flight requests at
// the kill plus the requests it completed just before (acks not yet
// flushed).
func (c *cluster) kill(slot int) {
	c.t.Helper()
	p := c.slots[slot]
	at := time.Now()
	inFlight := c.inFlightNow()
	c.markFailed(p)
	p.Signal(syscall.SIGKILL)
	c.addFailureBound(at, inFlight, "kill "+p.Name)
	if !p.Wait(10 * time.Second) {
		c.t.Fatalf("%s did not die on SIGKILL", p.Name)
	}
}

// inFlightNow returns each sink's requests in flight, in the order of subs.
func (c *cluster) inFlightNow() []int {
	out := make([]int, len(c.sinks))
	for i, s := range c.sinks {
		out[i] = s.InFlight()
	}
	return out
}

// addFailureBound adds to each subscription's bound the duplicates a node
// failing at at may cause it: its sink's requests in flight at the failure
// (inFlight, taken just before) plus those it completed in the
// cfg.unflushed before, whose acks the node may not have written yet.
func (c *cluster) addFailureBound(at time.Time, inFlight []int, what string) {
	totalIn, totalDone, most := 0, 0, 0
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, s := range c.sinks {
		done := s.CompletedSince(at.Add(-c.cfg.unflushed))
		c.bounds[i] += inFlight[i] + done
		totalIn += inFlight[i]
		totalDone += done
		most = max(most, inFlight[i]+done)
	}
	note := fmt.Sprintf("%s at %s: %d in flight + %d completed in the last %v", what, at.Format("15:04:05.000"), totalIn, totalDone, c.cfg.unflushed)
	if len(c.sinks) > 1 {
		note += fmt.Sprintf(" over %d subscriptions (at most %d for one)", len(c.sinks), most)
	}
	c.boundNotes = append(c.boundNotes, note)
}

// terminate sends SIGTERM to slot's process (a graceful shutdown) and, with
// wait, waits until it has exited.
func (c *cluster) terminate(slot int, wait bool) {
	c.t.Helper()
	p := c.slots[slot]
	p.Signal(syscall.SIGTERM)
	if wait && !p.Wait(time.Minute) {
		c.t.Fatalf("%s did not exit within a minute of SIGTERM", p.Name)
	}
}

// restartGracefully stops slot's process with SIGTERM, starts a new one in
// its place and waits until the group has settled with it.
func (c *cluster) restartGracefully(slot int) {
	c.t.Helper()
	c.terminate(slot, true)
	c.startSlot(slot)
	c.waitOwned(slot, time.Minute)
}

// addBound adds n duplicates to the first subscription's bound, for the
// faults that scenarios of one subscription measure at its sink.
func (c *cluster) addBound(n int, note string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bounds[0] += n
	c.boundNotes = append(c.boundNotes, note)
}

// partitionKeys names every partition's tracking state of the first
// subscription.
func (c *cluster) partitionKeys() []tracking.PartitionKey { return c.partitionKeysOf(c.sub) }

// partitionKeysOf names every partition's tracking state of sub.
func (c *cluster) partitionKeysOf(sub *subscription.Subscription) []tracking.PartitionKey {
	pks := make([]tracking.PartitionKey, c.cfg.partitions)
	for p := range pks {
		pks[p] = tracking.PartitionKey{Subscription: sub.ID, Topic: c.topic, Partition: int32(p)}
	}
	return pks
}

// owners returns each partition's owner as the tracking state says.
func (c *cluster) owners() map[int32]string {
	st, err := c.tracker.Load(context.Background(), c.partitionKeys())
	if err != nil {
		return nil
	}
	out := make(map[int32]string, len(st))
	for pk, s := range st {
		out[pk.Partition] = s.Owner
	}
	return out
}

// waitOwned waits until every partition has an owner among the live
// processes and the slot's process owns at least one partition: the group
// has settled after a join.
func (c *cluster) waitOwned(slot int, timeout time.Duration) {
	c.t.Helper()
	name := c.slots[slot].Name
	liveNames := map[string]bool{}
	for _, s := range c.live() {
		liveNames[c.slots[s].Name] = true
	}
	testutil.WaitFor(c.t, timeout, fmt.Sprintf("%s owns a partition and every partition has a live owner", name), func() bool {
		owners := c.owners()
		mine := false
		for p := range int32(c.cfg.partitions) {
			o := owners[p]
			if !liveNames[o] {
				return false
			}
			mine = mine || o == name
		}
		return mine
	})
}

// committed returns the group's committed offsets of the topic.
func (c *cluster) committed(ctx context.Context) (map[int32]int64, error) {
	return c.subject().Committed(ctx)
}

// ackedAboveCommit counts, per the sink, the records acked at or above the
// group's current commit: what a loss of the tracking state can make
// keyhook deliver again.
func (c *cluster) ackedAboveCommit() int {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	commits, err := c.committed(ctx)
	if err != nil {
		c.t.Fatalf("fetch commits: %v", err)
	}
	n := 0
	for _, d := range c.sink.Deliveries() {
		if d.Status >= 200 && d.Status < 300 && d.Offset >= commits[d.Partition] {
			n++
		}
	}
	return n
}

// logLines counts, over the logs of every process the scenario started,
// the lines containing each of substrs; scenarios report them to show
// which paths of keyhook a fault exercised.
func (c *cluster) logLines(substrs ...string) map[string]int {
	out := make(map[string]int, len(substrs))
	for _, p := range c.procs {
		data, err := os.ReadFile(p.LogPath)
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(data), "\n") {
			for _, s := range substrs {
				if strings.Contains(line, s) {
					out[s]++
				}
			}
		}
	}
	return out
}

// sleepFor lets a scenario run for d while its background work goes on.
func sleepFor(d time.Duration) { time.Sleep(d) }

// expect records seqs as committed data the log must hold.
func (c *cluster) expect(seqs ...int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range seqs {
		c.expected[s] = true
	}
}

// producer writes keyed records whose value carries a sequence number,
// {"seq":N}, with key "key-<N mod keys>" (or the scenario's key func);
// records are partitioned by key.
type producer struct {
	c      *cluster
	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	err      error
	produced int
}

// produce writes n records at rate records per second (all at once when
// rate is 0) from a goroutine of its own; wait ends it.
func (c *cluster) produce(n, rate int) *producer {
	ctx, cancel := context.WithCancel(context.Background())
	p := &producer{
		c:      c,
		cl:     newClient(c.t, c.brokers, kgo.ProducerLinger(5*time.Millisecond), kgo.DefaultProduceTopic(c.topic)),
		cancel: cancel,
		done:   make(chan struct{}),
	}
	c.t.Cleanup(func() {
		cancel()
		<-p.done
	})
	go p.run(ctx, n, rate)
	return p
}

func (p *producer) run(ctx context.Context, n, rate int) {
	defer close(p.done)
	const tick = 20 * time.Millisecond
	start := time.Now()
	var wg sync.WaitGroup
	// The callbacks of records already handed to the client still run
	// (failed, when ctx ended) before the producer counts as done.
	defer wg.Wait()
	for seq := range int64(n) {
		if rate > 0 {
			// Pace by the clock, not by ticks, so a slow tick is caught up.
			due := start.Add(time.Duration(seq) * time.Second / time.Duration(rate))
			if d := time.Until(due); d > tick {
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				}
			}
		}
		rec := verify.Record(seq, p.c.cfg.keys)
		if p.c.cfg.key != nil {
			rec.Key = []byte(p.c.cfg.key(seq))
		}
		wg.Add(1)
		p.cl.Produce(ctx, rec, func(r *kgo.Record, err error) {
			defer wg.Done()
			p.mu.Lock()
			defer p.mu.Unlock()
			if err != nil {
				if p.err == nil {
					p.err = err
				}
				return
			}
			p.produced++
			p.c.expect(seq)
		})
	}
}

// wait waits until every record was acknowledged by the broker.
func (p *producer) wait(timeout time.Duration) {
	t := p.c.t
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.cancel()
		<-p.done
		t.Fatalf("producer did not finish within %v (%d produced)", timeout, p.count())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		t.Fatalf("produce: %v", p.err)
	}
}

// finished reports whether the producer has written everything.
func (p *producer) finished() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *producer) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.produced
}

// inflightMonitor samples the sink's in-flight count every 10ms, so that a
// fault without a precise moment (a broker restart) can be bounded by the
// most that was in flight around it.
type inflightMonitor struct {
	sink *testutil.Sink

	mu      sync.Mutex
	samples []inflightSample
}

type inflightSample struct {
	at time.Time
	n  int
}

func (m *inflightMonitor) run(ctx context.Context) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			n := m.sink.InFlight()
			m.mu.Lock()
			m.samples = append(m.samples, inflightSample{time.Now(), n})
			m.mu.Unlock()
		}
	}
}

// maxInFlight is the most requests in flight at the sink between from and
// to.
func (m *inflightMonitor) maxInFlight(from, to time.Time) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	most := 0
	for _, s := range m.samples {
		if !s.at.Before(from) && !s.at.After(to) {
			most = max(most, s.n)
		}
	}
	return most
}

// windowBound over-approximates the duplicates a fault spread over
// [from, to] may cause when the moment a node lost a partition is not
// known: the most requests in flight at any moment of the window plus the
// most completed in any unflushedWindow of it.
func (c *cluster) windowBound(from, to time.Time) (inFlight, unflushed int) {
	inFlight = c.inflight.maxInFlight(from, to)
	var ends []time.Time
	for _, d := range c.sink.Deliveries() {
		if !d.End.Before(from.Add(-unflushedWindow)) && !d.End.After(to) {
			ends = append(ends, d.End)
		}
	}
	slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
	for i, j := 0, 0; j < len(ends); j++ {
		for ends[j].Sub(ends[i]) > unflushedWindow {
			i++
		}
		unflushed = max(unflushed, j-i+1)
	}
	return inFlight, unflushed
}

func newClient(t *testing.T, brokers []string, opts ...kgo.Opt) *kgo.Client {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}
