package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/keyhook/keyhook/delivery"
	"github.com/keyhook/keyhook/keyrange"
	"github.com/keyhook/keyhook/partition"
	"github.com/keyhook/keyhook/recordexpr"
	"github.com/keyhook/keyhook/sharing"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
)

type topicPartition struct {
	topic     string
	partition int32
}

// group is one subscription's consumer group member on this node.
type group struct {
	n   *Node
	sub *subscription.Subscription
	// cl is set by newGroup and, earlier, by the first group callback: the
	// client joins the group inside kgo.NewClient, so a callback can run
	// before NewClient has returned.
	cl  atomic.Pointer[kgo.Client]
	log *slog.Logger
	tel *telemetry
	// partition configures every partition's state machine.
	partition partition.Config
	// live says whether the coordinator still counts this node a member;
	// it hooks the client's round trips.
	live *liveness
	// ep renders and paces the subscription's deliveries, resolved once.
	ep *delivery.Endpoint
	// dlw writes the records that failed for good.
	dlw deadLetterWriter
	// watchHealth is set when the node has a Health monitor and the
	// subscription sets disable_after: its attempts are told.
	watchHealth bool
	// readerID is the consumer group of the shared read, set by newGroup
	// (readerGroup).
	readerID string
	// Metric attribute sets, built once so the hot path allocates none.
	attrs        attribute.Set
	classAttrs   map[string]attribute.Set
	outcomeAttrs map[string]attribute.Set
	opts         deliveryOpts

	// pool runs the deliveries one attempt at a time; its MaxInFlight
	// slots bound the subscription's attempts in flight on the node.
	pool *pool
	// redriver feeds the workers from the node's RedriveQueue, nil
	// without one; the pool's redrive slots deliver what it injected.
	redriver *redriver

	// rd is the reader whose cursor the group is (Tuning.SharedRead),
	// nil when the group reads with a client of its own; set before run
	// starts any worker.
	rd *reader

	// balancer shares partitions by key range (nil when the subscription
	// does not share); assigned is the key ranges of each partition as
	// the latest sync gave them, absent meaning all of them.
	balancer *sharing.Balancer
	assigned map[topicPartition]keyrange.Set
	// retention is each topic's time-based retention as last read (see
	// retention.go), nil before the first read.
	retention atomic.Pointer[map[string]time.Duration]

	// handovers are the handovers of single partitions a cursor starts
	// off its reader's sync (readshare.go); runCursor waits for them.
	handovers sync.WaitGroup

	mu      sync.Mutex
	workers map[topicPartition]*worker
	// starts is what was read about each newly assigned partition, kept
	// from its assignment until its offsets are fetched.
	starts map[topicPartition]partitionStart
	// wctx is the parent of every worker; it outlives revokes and ends when
	// the group stops. It exists before the client, whose callbacks use it.
	wctx        context.Context
	stopWorkers context.CancelFunc
	// commitMu serialises commits so a slow commit never lands after a newer
	// one and moves the offset backwards.
	commitMu sync.Mutex

	counters
}

// counters are the group's running totals for stats.
type counters struct {
	// topicPartitions counts the partitions of the subscription's topics.
	topicPartitions atomic.Int64
	delivered       atomic.Int64
	deadLettered    atomic.Int64
	filtered        atomic.Int64
	inFlight        atomic.Int64
	retrying        atomic.Int64
	commitErrors    atomic.Int64
}

func newGroup(n *Node, s *subscription.Subscription) (*group, error) {
	g := &group{
		n: n, sub: s,
		log:     n.log.With("subscription", s.ID),
		workers: make(map[topicPartition]*worker),
		starts:  make(map[topicPartition]partitionStart),
	}
	g.pool = newPool(g)
	g.live = newLiveness(n.cfg.lease(), nil)
	g.initTelemetry()
	g.partition = partitionConfig(s, n.cfg.MaxWindow, *n.cfg.ParkAfter)
	g.partition.Budget = n.budget
	g.partition.ParkBudget = n.parkBudget
	if err := g.partition.Validate(); err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	g.ep = delivery.New(s, n.cfg.Retry, recordexpr.WithSchemas(n.cfg.Schemas))
	g.watchHealth = n.cfg.Health != nil && s.DisableAfterDuration() > 0
	dlw, err := g.newDeadLetterWriter()
	if err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	g.dlw = dlw
	if n.cfg.Redrives != nil {
		g.redriver = newRedriver(g, n.cfg.Redrives)
	}
	g.wctx, g.stopWorkers = context.WithCancel(context.Background())
	if n.cfg.SharedRead {
		// A cursor: the reader of its topics fetches for it (reader.go).
		g.readerID = readerGroupID(s.Topics)
		return g, nil
	}
	// Every group resets to the earliest offset, whatever its start: the
	// start was committed for the group when the subscription was created,
	// so a partition without a commit has not been read yet (start.go).
	reset := kgo.NewOffset().AtStart()
	balancers := []kgo.GroupBalancer{kgo.CooperativeStickyBalancer()}
	if s.Shares() {
		b, err := sharing.New(sharing.Config{Sharing: true, OnSync: g.onSync})
		if err != nil {
			g.stopWorkers()
			return nil, fmt.Errorf("dispatcher: %w", err)
		}
		g.balancer = b
		// Nodes that do not share yet (a rolling upgrade) still agree on
		// cooperative-sticky, whose partitions are whole.
		balancers = []kgo.GroupBalancer{b, wholePartitions{GroupBalancer: balancers[0], onSync: g.onSync}}
	}
	opts := n.memberOpts(s.GroupID(), s.Topics, reset, balancers, memberCallbacks{
		assigned: g.onAssigned, revoked: g.onRevoked, lost: g.onLost, offsets: g.onOffsetsFetched, live: g.live,
	})
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		g.stopWorkers()
		return nil, fmt.Errorf("dispatcher: kafka client: %w", err)
	}
	g.cl.Store(cl)
	return g, nil
}

// memberCallbacks is what a consumer group member of the node, a
// subscription's group or a reader, is told by its client.
type memberCallbacks struct {
	assigned, revoked, lost func(context.Context, *kgo.Client, map[string][]int32)
	offsets                 func(context.Context, map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error)
	live                    *liveness
}

// memberOpts are the options of a client joining group to consume
// topics, partitions without a commit starting at reset.
func (n *Node) memberOpts(group string, topics []string, reset kgo.Offset, balancers []kgo.GroupBalancer, cb memberCallbacks) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(n.cfg.Brokers...),
		kgo.ClientID("keyhook-" + n.cfg.NodeID),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(reset),
		kgo.DisableAutoCommit(),
		kgo.Balancers(balancers...),
		kgo.SessionTimeout(n.cfg.SessionTimeout),
		kgo.HeartbeatInterval(n.cfg.heartbeatInterval()),
		// Rebalances wait while records of a poll are handed to workers, so a
		// worker never receives records of a partition it no longer owns.
		kgo.BlockRebalanceOnPoll(),
		// Aborted transactional data is never delivered; control records are
		// kept so the watermark can walk over them to the log end.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.FetchMaxWait(500 * time.Millisecond),
		kgo.OnPartitionsAssigned(cb.assigned),
		kgo.OnPartitionsRevoked(cb.revoked),
		kgo.OnPartitionsLost(cb.lost),
		kgo.AdjustFetchOffsetsFn(cb.offsets),
		kgo.WithHooks(cb.live),
	}
	return append(opts, n.cfg.KafkaOptions...)
}

// run polls until ctx ends, then shuts down in this order: stop polling,
// drain every partition (in-flight deliveries up to DrainTimeout), flush and
// commit, release the claims, leave the group, stop the delivery pool.
// Its commits, retention reads and redrive polls are the node's loops'
// (loops.go), which it joins while it polls; its deliveries run in
// goroutines its pool starts on demand.
func (g *group) run(ctx context.Context) error {
	if g.n.cfg.SharedRead {
		return g.runCursor(ctx)
	}
	g.ensureDeadLetterTopics(ctx)
	g.n.loops.join(g)
	g.log.Info("consumer started", "group", g.sub.GroupID(), "topics", g.sub.Topics, "ordering", g.sub.Ordering)
	err := g.poll(ctx)
	g.n.loops.leave(g)

	// Graceful shutdown: everything this node owns is handed over cleanly.
	g.releaseAll(g.takeWorkers(nil), true)
	g.client().Close()
	g.stopWorkers()
	g.pool.close()
	g.log.Info("consumer stopped")
	return err
}

// ensureDeadLetterTopics creates the subscription's dead-letter topics
// when they are missing (broker defaults for partitions and replication),
// so the first dead letter does not wait on a topic nobody created. A
// refusal (ACLs) is logged; dead-lettering then retries and logs until an
// operator creates the topic.
func (g *group) ensureDeadLetterTopics(ctx context.Context) {
	var topics []string
	seen := map[string]bool{}
	for _, t := range g.sub.Topics {
		if d := g.sub.DeadLetterTopicFor(t); d != "" && !seen[d] {
			seen[d] = true
			topics = append(topics, d)
		}
	}
	if len(topics) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(g.client()).CreateTopics(ctx, -1, -1, nil, topics...)
	if err != nil {
		g.log.Warn("cannot create dead-letter topics", "topics", topics, "err", err)
		return
	}
	for _, r := range resp {
		switch {
		case r.Err == nil:
			g.log.Info("dead-letter topic created", "topic", r.Topic)
		case errors.Is(r.Err, kerr.TopicAlreadyExists):
		default:
			g.log.Warn("cannot create dead-letter topic", "topic", r.Topic, "err", r.Err)
		}
	}
}

func (g *group) poll(ctx context.Context) error {
	for {
		fetches := g.client().PollRecords(ctx, 10000)
		if fetches.IsClientClosed() || ctx.Err() != nil {
			g.client().AllowRebalance()
			return nil
		}
		fetches.EachError(func(topic string, p int32, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			g.countError("fetch")
			g.log.Warn("fetch error", "topic", topic, "partition", p, "err", err)
		})
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			g.mu.Lock()
			w := g.workers[topicPartition{p.Topic, p.Partition}]
			g.mu.Unlock()
			if w != nil {
				w.highWatermark.Store(p.HighWatermark)
				w.logStart.Store(p.LogStartOffset)
				g.tel.fetched.Add(ctx, int64(len(p.Records)), metric.WithAttributeSet(w.attrs))
				w.push(p.Records)
			}
		})
		g.client().AllowRebalance()
	}
}

func (g *group) onAssigned(_ context.Context, cl *kgo.Client, assigned map[string][]int32) {
	g.cl.CompareAndSwap(nil, cl)
	_, gen := cl.GroupMetadata()
	starts := g.learnStarts(cl, assigned)
	g.mu.Lock()
	defer g.mu.Unlock()
	for topic, ps := range assigned {
		for _, p := range ps {
			tp := topicPartition{topic, p}
			if _, ok := g.workers[tp]; ok {
				continue
			}
			g.starts[tp] = starts[tp]
			w := newWorker(g, tp, gen, g.assigned[tp])
			w.topicID = starts[tp].topicID
			g.workers[tp] = w
			w.start(g.wctx)
		}
	}
	g.countRebalance("assigned", assigned)
	g.log.Info("partitions assigned", "partitions", assigned, "generation", gen)
}

// onSync records the key ranges a sync assigned (from franz-go's group
// goroutine: it must not block) and hands the partitions kept a narrower
// set; their workers give the rest up (worker.reshape). Partitions newly
// assigned take theirs in onAssigned, which follows.
func (g *group) onSync(a sharing.Assignment) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.assigned = make(map[topicPartition]keyrange.Set)
	for topic, ps := range a {
		for p, rs := range ps {
			g.assigned[topicPartition{topic, p}] = rs
		}
	}
	for tp, w := range g.workers {
		if rs, ok := g.assigned[tp]; ok {
			w.setTarget(rs)
		}
	}
}

// rangesReleased tells the balancer a worker gave up the ranges it no
// longer holds, and, once no worker is still giving some up, asks for a
// rebalance: the balancer hands released ranges over only in the next
// generation, after their old owner said so. A cursor's worker tells its
// reader, whose balancer waits for every cursor (reader.rangesReleased).
func (g *group) rangesReleased(w *worker, keep keyrange.Set) {
	if g.rd != nil {
		g.rd.rangesReleased(w, keep)
		return
	}
	if g.balancer == nil {
		return
	}
	tp := w.tp
	g.balancer.Released(tp.topic, tp.partition, keep)
	g.mu.Lock()
	busy := false
	for _, w := range g.workers {
		if t := w.rs.target.Load(); t != nil && !t.Covers(w.ranges()) {
			busy = true
		}
	}
	g.mu.Unlock()
	if !busy {
		g.log.Info("key ranges released; rebalancing to hand them over")
		g.client().ForceRebalance()
	}
}

// wholePartitions is the cooperative-sticky balancer a sharing group (or
// reader) offers beside its own, for members that do not share yet: when
// the group agrees on it, every partition assigned is whole.
type wholePartitions struct {
	kgo.GroupBalancer
	onSync func(sharing.Assignment)
}

func (b wholePartitions) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	a, err := b.GroupBalancer.ParseSyncAssignment(assignment)
	if err != nil {
		return nil, err
	}
	whole := make(sharing.Assignment, len(a))
	for topic, ps := range a {
		whole[topic] = make(map[int32]keyrange.Set, len(ps))
		for _, p := range ps {
			whole[topic][p] = keyrange.Full()
		}
	}
	b.onSync(whole)
	return a, nil
}

// onOffsetsFetched decides where each assigned partition starts: at the
// group's commit, which its worker learns, unless the commit is missing
// or stale and the log and the tracking state say better (start.go).
func (g *group) onOffsetsFetched(ctx context.Context, offs map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	return g.startOffsets(ctx, offs), nil
}

func (g *group) onRevoked(_ context.Context, cl *kgo.Client, revoked map[string][]int32) {
	g.cl.CompareAndSwap(nil, cl)
	g.countRebalance("revoked", revoked)
	g.log.Info("partitions revoked", "partitions", revoked)
	g.releaseAll(g.takeWorkers(revoked), true)
}

func (g *group) onLost(_ context.Context, cl *kgo.Client, lost map[string][]int32) {
	g.cl.CompareAndSwap(nil, cl)
	g.countRebalance("lost", lost)
	g.log.Warn("partitions lost", "partitions", lost)
	g.releaseAll(g.takeWorkers(lost), false)
}

// takeWorkers removes and returns the workers of the given partitions (all
// of them when tps is nil), so the poll loop stops feeding them.
func (g *group) takeWorkers(tps map[string][]int32) []*worker {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []*worker
	for tp, w := range g.workers {
		if tps != nil && !containsPartition(tps, tp) {
			continue
		}
		out = append(out, w)
		delete(g.workers, tp)
	}
	return out
}

func containsPartition(tps map[string][]int32, tp topicPartition) bool {
	for _, p := range tps[tp.topic] {
		if p == tp.partition {
			return true
		}
	}
	return false
}

// releaseAll lets go of workers. Gracefully: drain in-flight deliveries up
// to DrainTimeout, flush all the partitions in one round, commit the
// watermarks flushed, release the claims in one round, so the next owner
// neither loses nor repeats anything. Otherwise (partitions lost, another
// node may already own them): abort deliveries and flush what is known in
// one round; the epoch fences whatever arrives too late. The tracker's
// rounds share one deadline: a hung Redis costs a handover that deadline,
// however many partitions it hands over.
func (g *group) releaseAll(ws []*worker, graceful bool) {
	if len(ws) == 0 {
		return
	}
	if graceful {
		deadline := time.Now().Add(g.n.cfg.DrainTimeout)
		var wg sync.WaitGroup
		for _, w := range ws {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.drain(deadline)
			}()
		}
		wg.Wait()
	} else {
		for _, w := range ws {
			w.abort()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	var reqs []flushReq
	for _, w := range ws {
		if r, ok := w.handover(ctx); ok {
			reqs = append(reqs, r)
		}
	}
	res := g.n.flusher.write(ctx, reqs)
	var rels []tracking.PartitionRelease
	var relWorkers []*worker
	for i, r := range reqs {
		if rel, ok := r.w.handedOver(r.result(res[i])); ok {
			rels = append(rels, rel)
			relWorkers = append(relWorkers, r.w)
		}
	}
	if graceful {
		g.commit(ws)
		// Released, the partition shows no owner until the next one claims.
		if len(rels) > 0 {
			for i, err := range g.n.tracker.ReleaseMany(ctx, rels) {
				if err != nil && !errors.Is(err, tracking.ErrFenced) {
					relWorkers[i].log.Warn("release failed", "err", err)
				}
			}
		}
	}
	for _, w := range ws {
		w.cancel()
	}
	for _, w := range ws {
		<-w.done
	}
	if g.rd != nil {
		g.rd.handedOver(ws)
	}
}

// hasCommit says whether a partition has a watermark to commit.
func (g *group) hasCommit() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, w := range g.workers {
		if _, ok := w.commitCandidate(); ok {
			return true
		}
	}
	return false
}

// countTopicPartitions reads how many partitions the subscription's topics
// have, for the partitions.total gauge.
func (g *group) countTopicPartitions(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	md, err := kadm.NewClient(g.client()).Metadata(ctx, g.sub.Topics...)
	if err != nil {
		return
	}
	n := 0
	for _, t := range md.Topics {
		if t.Err == nil {
			n += len(t.Partitions)
		}
	}
	g.topicPartitions.Store(int64(n))
}

// commit moves each worker's Kafka commit forward to its watermark. Kafka
// fences the commit by group generation, so a node that lost the group
// cannot commit; offsets only ever move forward.
func (g *group) commit(ws []*worker) {
	if g.rd != nil {
		g.commitCursor(ws)
		return
	}
	g.commitMu.Lock()
	defer g.commitMu.Unlock()
	offsets := make(map[string]map[int32]kgo.EpochOffset)
	want := make(map[topicPartition]*worker)
	for _, w := range ws {
		wm, ok := w.commitCandidate()
		if !ok {
			continue
		}
		if offsets[w.tp.topic] == nil {
			offsets[w.tp.topic] = make(map[int32]kgo.EpochOffset)
		}
		offsets[w.tp.topic][w.tp.partition] = kgo.EpochOffset{Epoch: -1, Offset: wm}
		want[w.tp] = w
	}
	if len(offsets) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var commitErr error
	started := time.Now()
	defer func() { g.tel.commitTime.Record(ctx, time.Since(started).Seconds(), metric.WithAttributeSet(g.attrs)) }()
	g.client().CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			commitErr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				w := want[topicPartition{t.Topic, p.Partition}]
				if w == nil {
					continue
				}
				if perr := kerr.ErrorForCode(p.ErrorCode); perr != nil {
					commitErr = perr
					continue
				}
				w.committedTo(offsets[t.Topic][p.Partition].Offset)
			}
		}
	})
	if commitErr != nil {
		g.commitErrors.Add(1)
		g.countError("commit")
		g.log.Warn("commit failed", "err", commitErr)
	}
}

// GroupStats is a snapshot of one subscription's group on a node.
type GroupStats struct {
	Subscription string
	// Reader is the consumer group of the shared read the subscription is
	// a cursor of (SharedRead), "" when it reads with a group of its own.
	Reader       string
	Delivered    int64
	DeadLettered int64
	// Filtered counts the records the filter rejected (see
	// keyhook_records_filtered_total).
	Filtered int64
	// InFlight counts the attempts running (a batch request is one), at
	// most the subscription's MaxInFlight.
	InFlight int64
	// Retrying counts the deliveries waiting for their next attempt; they
	// hold no delivery slot.
	Retrying     int64
	CommitErrors int64
	Partitions   []PartitionStats
}

// PartitionStats is a snapshot of one owned partition.
type PartitionStats struct {
	Topic     string
	Partition int32
	Watermark int64
	Committed int64
	Paused    bool
	// Pending counts fetched records not yet acked.
	Pending int64
	// Claimed is false until the tracker accepted this node's claim.
	Claimed bool
	// Ranges are the key hashes of the partition this node delivers: all
	// of them (keyrange.Full) unless the partition is shared; nil before
	// the claim.
	Ranges keyrange.Set
	// NotOwned counts the records read that other sharers deliver.
	NotOwned int64
	// Parked counts the pending records held by offset only (of Pending);
	// Reread the records read again from Kafka to take them back.
	Parked, Reread int64
	// Detached is set while the partition's cursor catches up on a read
	// of its own instead of taking the node's shared read (SharedRead).
	Detached bool
}

func (g *group) stats() GroupStats {
	s := GroupStats{
		Subscription: g.sub.ID,
		Reader:       g.readerGroup(),
		Delivered:    g.delivered.Load(),
		DeadLettered: g.deadLettered.Load(),
		Filtered:     g.filtered.Load(),
		InFlight:     g.inFlight.Load(),
		Retrying:     g.retrying.Load(),
		CommitErrors: g.commitErrors.Load(),
	}
	g.mu.Lock()
	for _, w := range g.workers {
		s.Partitions = append(s.Partitions, w.stats())
	}
	g.mu.Unlock()
	sort.Slice(s.Partitions, func(i, j int) bool {
		a, b := s.Partitions[i], s.Partitions[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		return a.Partition < b.Partition
	})
	return s
}

func sortStats(s []GroupStats) {
	sort.Slice(s, func(i, j int) bool { return s[i].Subscription < s[j].Subscription })
}

func (g *group) client() *kgo.Client {
	if g.rd != nil {
		return g.rd.client()
	}
	return g.cl.Load()
}

// snapshotWorkers returns the workers of the partitions owned now.
func (g *group) snapshotWorkers() []*worker {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]*worker, 0, len(g.workers))
	for _, w := range g.workers {
		out = append(out, w)
	}
	return out
}

func (g *group) partitionKey(tp topicPartition) tracking.PartitionKey {
	return tracking.PartitionKey{Subscription: g.sub.ID, Topic: tp.topic, Partition: tp.partition}
}
