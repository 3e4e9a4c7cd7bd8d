package dispatcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/breaker"
	"github.com/keyhook/keyhook/internal/backoff"
	"github.com/keyhook/keyhook/keyrange"
	"github.com/keyhook/keyhook/partition"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
	"github.com/keyhook/keyhook/webhooks"
)

// Sender sends requests; webhooks.Client implements it. The delivery pool
// makes each attempt itself (Attempt, under a webhooks.Retries) so that a
// record waiting for a retry holds no slot; a redelivery, alone, lets
// Deliver retry. The sender carries ctx's trace context to the endpoint
// (webhooks.Client writes it, or its attempt span's, into every attempt).
type Sender interface {
	Attempt(ctx context.Context, r *webhooks.Request, n int) (webhooks.Attempt, error)
	Deliver(ctx context.Context, r *webhooks.Request, p webhooks.RetryPolicy, onAttempt func(webhooks.Attempt)) webhooks.Result
}

// slotSender is a Sender whose endpoints' limiters the delivery pools
// wait on themselves: a delivery waiting for its origin's slot then costs
// a waiter, not a goroutine parked in Attempt with its stack (1,000
// subscriptions behind one capped origin parked 41,000). *webhooks.Client
// is one.
type slotSender interface {
	// Limiter is the limiter of the endpoint's origin, nil if none.
	Limiter(rawURL string) *webhooks.Limiter
	// AttemptIn is Attempt in a slot taken from it; it gives s back.
	AttemptIn(ctx context.Context, r *webhooks.Request, n int, s *webhooks.Slot) webhooks.Attempt
}

// Tracker keeps partition state where another node can find it;
// tracking.Store implements it. A claim is of a partition's key ranges
// (all of them unless the partition is shared); a claim is given the
// topic's Kafka ID ("" unknown) so that state of a deleted topic of the
// same name is dropped, not resumed; Load is read at assignment, to
// resume a partition whose group commit is gone at its tracked watermark.
type Tracker interface {
	// ClaimMany claims many partitions in one round trip, answering each
	// in order.
	ClaimMany(ctx context.Context, cs []tracking.PartitionClaim) []tracking.ClaimResult
	Load(ctx context.Context, pks []tracking.PartitionKey) (map[tracking.PartitionKey]tracking.PartitionState, error)
	// FlushRanges and ReleaseMany write many partitions in one round
	// trip, answering each in order; a flush answers the partition's
	// merged watermark over every sharer.
	FlushRanges(ctx context.Context, fs []tracking.PartitionFlush) []tracking.FlushResult
	// RenewRanges confirms claims as a flush would, writing no state.
	RenewRanges(ctx context.Context, rs []tracking.PartitionRenewal) []error
	ReleaseMany(ctx context.Context, rs []tracking.PartitionRelease) []error
	// ReleaseRanges gives up part of a claim, drained and flushed.
	ReleaseRanges(ctx context.Context, pk tracking.PartitionKey, epoch int64, ranges keyrange.Set) error
}

// Subscriptions feeds the node the current subscription set;
// subscription.Store implements it.
type Subscriptions interface {
	Watch(ctx context.Context, resync time.Duration, fn func([]*subscription.Subscription)) error
}

// Node is one dispatcher node: it runs a consumer group for every
// subscription and restarts a group when its subscription changes.
type Node struct {
	cfg    Config
	subs   Subscriptions
	sender Sender
	// slotted is sender when it lets the pools wait for their origins'
	// slots (slotSender); nil otherwise.
	slotted slotSender
	tracker Tracker
	// redeliver sends redriven dead letters.
	redeliver *Redeliverer
	log       *slog.Logger
	tel       *telemetry
	// budget bounds the bytes all partitions of the node hold;
	// parkBudget what their parked records cost.
	budget, parkBudget *partition.MemoryBudget
	// flusher writes the tracking state of all partitions, one round per
	// FlushInterval.
	flusher *flusher
	// claims makes the partitions' claims, pipelined in rounds.
	claims *claimer
	// renewer renews the ownership leases of the node's partitions.
	renewer *renewer
	// loops commit, read the topics and poll the redrive queues of every
	// group, one goroutine each for the node.
	loops *loops
	// breakers are the node's circuit breakers, one per endpoint origin
	// (off unless BreakerFailures is set); rateTokens hands out the
	// tokens of rate-limited subscriptions.
	breakers   *breaker.Set
	rateTokens RateTokens

	// readersMu guards readers: the shared read of each topic set
	// (SharedRead), started by its first cursor, stopped by its last.
	readersMu sync.Mutex
	readers   map[string]*reader
	// catchups holds a token per catch-up pass running (maxCatchups).
	catchups chan struct{}
	// admin is a client without a group the cursors ask about their
	// subscriptions' own groups (cursor.go), made on first use; guarded
	// by readersMu, closed by Run.
	admin *kgo.Client
	// commits are the clients the cursors commit through; closed by Run.
	commits *committers
	// spawn runs the deliveries and partition loop turns on reused
	// goroutines; stopped by Run once every group stopped.
	spawn *spawner

	mu      sync.Mutex
	runners map[string]*runner
	// missing is since when each running subscription has been missing
	// from the set (see Config.RemoveGrace).
	missing map[string]time.Time
	wg      sync.WaitGroup
}

// New builds a node; it starts nothing until Run.
func New(cfg Config, subs Subscriptions, sender Sender, tracker Tracker) (*Node, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if subs == nil || sender == nil || tracker == nil {
		return nil, errors.New("dispatcher: subscriptions, sender and tracker are required")
	}
	budget, err := partition.NewMemoryBudget(cfg.MaxBufferedBytes)
	if err != nil {
		return nil, fmt.Errorf("dispatcher: MaxBufferedBytes: %w", err)
	}
	parkBudget, err := partition.NewMemoryBudget(cfg.MaxParkedBytes)
	if err != nil {
		return nil, fmt.Errorf("dispatcher: MaxParkedBytes: %w", err)
	}
	redeliver, err := NewRedeliverer(sender, RedeliverConfig{})
	if err != nil {
		return nil, err
	}
	log := cfg.Logger.With("node", cfg.NodeID)
	n := &Node{
		cfg: cfg, subs: subs, sender: sender, tracker: tracker, redeliver: redeliver,
		log:      log,
		runners:  make(map[string]*runner),
		missing:  make(map[string]time.Time),
		readers:  make(map[string]*reader),
		catchups: make(chan struct{}, maxCatchups),
		budget:   budget, parkBudget: parkBudget,
		flusher: newFlusher(tracker, cfg.FlushInterval, log),
		claims:  newClaimer(tracker, log),
		spawn:   newSpawner(),
		commits: newCommitters(append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...), kgo.ClientID("keyhook-" + cfg.NodeID + "-commit")}, cfg.KafkaOptions...)),
	}
	n.slotted, _ = sender.(slotSender)
	n.renewer = newRenewer(tracker, cfg.lease(), n.log)
	n.loops = newLoops(n)
	if n.breakers, err = newBreakers(n); err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	n.rateTokens = cfg.RateTokens
	if n.rateTokens == nil {
		n.rateTokens = newLocalTokens()
	}
	tel, err := newTelemetry(n)
	if err != nil {
		return nil, fmt.Errorf("dispatcher: telemetry: %w", err)
	}
	n.tel = tel
	return n, nil
}

// joinReader makes g a cursor of the reader of its topics, starting the
// reader when g is its first.
func (n *Node) joinReader(ctx context.Context, g *group) error {
	n.readersMu.Lock()
	key := topicSetKey(g.sub.Topics)
	if r := n.readers[key]; r != nil {
		g.rd, g.live = r, r.live
		// Queued under readersMu, so that no cursor leaving stops the
		// reader meanwhile; attached without it, together with the
		// cursors joining beside it.
		r.enqueue(g)
		n.readersMu.Unlock()
		r.attachJoining(ctx)
		return nil
	}
	defer n.readersMu.Unlock()
	r, err := newReader(n, g.sub.Topics, g)
	if err != nil {
		g.rd = nil
		return err
	}
	n.readers[key] = r
	r.start()
	return nil
}

// adminClient returns the node's client for admin requests.
func (n *Node) adminClient() (*kgo.Client, error) {
	n.readersMu.Lock()
	defer n.readersMu.Unlock()
	return n.adminClientLocked()
}

// adminClientLocked is adminClient with n.readersMu held.
func (n *Node) adminClientLocked() (*kgo.Client, error) {
	if n.admin == nil {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(n.cfg.Brokers...), kgo.ClientID("keyhook-" + n.cfg.NodeID + "-admin")}, n.cfg.KafkaOptions...)...)
		if err != nil {
			return nil, err
		}
		n.admin = cl
	}
	return n.admin, nil
}

// leaveReader takes g off its reader, and stops the reader when g was its
// last cursor.
func (n *Node) leaveReader(g *group) {
	n.readersMu.Lock()
	defer n.readersMu.Unlock()
	key := topicSetKey(g.sub.Topics)
	r := n.readers[key]
	if r == nil {
		return
	}
	r.detach(g)
	if r.empty() {
		delete(n.readers, key)
		r.stop()
	}
}

// groups returns the running groups.
func (n *Node) groups() []*group {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]*group, 0, len(n.runners))
	for _, r := range n.runners {
		if g := r.current(); g != nil {
			out = append(out, g)
		}
	}
	return out
}

// Run follows the subscription set until ctx ends, then stops every group
// gracefully (drain, flush, commit, leave) and returns once all stopped.
// The flusher runs until the last group stopped: a group writes its final
// state itself, but its partitions flush through the flusher until then;
// the renewer and the claimer too, since a stopping worker waits for its
// claim's answer.
func (n *Node) Run(ctx context.Context) error {
	fctx, stopFlusher := context.WithCancel(context.Background())
	flusherDone := make(chan struct{})
	go func() {
		defer close(flusherDone)
		n.flusher.run(fctx)
	}()
	renewerDone := make(chan struct{})
	go func() {
		defer close(renewerDone)
		n.renewer.run(fctx)
	}()
	claimerDone := make(chan struct{})
	go func() {
		defer close(claimerDone)
		n.claims.run(fctx)
	}()
	// The loops stop once the last group left them.
	lctx, stopLoops := context.WithCancel(context.Background())
	loopsDone := make(chan struct{})
	go func() {
		defer close(loopsDone)
		n.loops.run(lctx)
	}()
	err := n.subs.Watch(ctx, n.cfg.ResyncInterval, n.reconcile)
	n.mu.Lock()
	for id, r := range n.runners {
		r.cancel()
		delete(n.runners, id)
	}
	n.mu.Unlock()
	n.wg.Wait()
	n.readersMu.Lock()
	if n.admin != nil {
		n.admin.Close()
		n.admin = nil
	}
	n.readersMu.Unlock()
	stopLoops()
	<-loopsDone
	n.commits.close()
	n.spawn.stop()
	stopFlusher()
	<-flusherDone
	<-renewerDone
	<-claimerDone
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("dispatcher: watch subscriptions: %w", err)
	}
	return nil
}

// Stats returns a snapshot of every running group, sorted by subscription.
func (n *Node) Stats() []GroupStats {
	gs := n.groups()
	out := make([]GroupStats, 0, len(gs))
	for _, g := range gs {
		out = append(out, g.stats())
	}
	sortStats(out)
	return out
}

// BufferedBytes returns the bytes of fetched records the node holds until
// they are acked, over every partition (bounded by MaxBufferedBytes).
func (n *Node) BufferedBytes() int64 { return n.budget.Used() }

// Ownership names a partition a node owns for a subscription.
type Ownership struct {
	Subscription string `json:"subscription"`
	Topic        string `json:"topic"`
	Partition    int32  `json:"partition"`
	// Claimed is false while the partition is assigned to this node but
	// its claim in the tracker is refused or failing: nothing of it is
	// delivered then.
	Claimed bool `json:"claimed"`
	// Ranges are the key hashes of the partition the node delivers, as
	// "lo-hi" ranges (hi exclusive, of 0–65536); "" for all of them.
	Ranges string `json:"ranges,omitempty"`
	// Reader is the consumer group of the shared read the partition is
	// read with (--shared-read), "" when the subscription reads with a
	// group of its own.
	Reader string `json:"reader,omitempty"`
	// CatchingUp is set while the subscription's cursor reads the
	// partition on its own to catch up with the shared read.
	CatchingUp bool `json:"catching_up,omitempty"`
}

// Owned lists the partitions this node owns right now, sorted by
// subscription, topic and partition. The heartbeat calls it every few
// seconds over every cursor's partitions, so it reads the workers
// directly: through Stats it built and sorted a GroupStats per
// subscription, half of an idle node's allocations at 1,000 of them.
func (n *Node) Owned() []Ownership {
	gs := n.groups()
	slices.SortFunc(gs, func(a, b *group) int { return strings.Compare(a.sub.ID, b.sub.ID) })
	size := 0
	for _, g := range gs {
		g.mu.Lock()
		size += len(g.workers)
		g.mu.Unlock()
	}
	out := make([]Ownership, 0, size)
	for _, g := range gs {
		from := len(out)
		reader := g.readerGroup()
		g.mu.Lock()
		for _, w := range g.workers {
			o := Ownership{Subscription: g.sub.ID, Topic: w.tp.topic, Partition: w.tp.partition,
				Claimed: w.pub.claimed.Load() && !w.pub.fenced.Load(), Reader: reader, CatchingUp: w.pub.detached.Load()}
			if r := w.ranges(); r != nil && !r.IsFull() {
				o.Ranges = r.String()
			}
			out = append(out, o)
		}
		g.mu.Unlock()
		slices.SortFunc(out[from:], func(a, b Ownership) int {
			if c := strings.Compare(a.Topic, b.Topic); c != 0 {
				return c
			}
			return cmp.Compare(a.Partition, b.Partition)
		})
	}
	return out
}

func (n *Node) reconcile(subs []*subscription.Subscription) {
	n.mu.Lock()
	defer n.mu.Unlock()
	want := make(map[string]*subscription.Subscription, len(subs))
	for _, s := range subs {
		want[s.ID] = s
	}
	now := time.Now()
	for id, r := range n.runners {
		if _, ok := want[id]; ok {
			if _, was := n.missing[id]; was {
				n.log.Info("subscription back in the store; its consumer kept running", "subscription", id)
				delete(n.missing, id)
			}
			continue
		}
		since, was := n.missing[id]
		if !was && n.cfg.RemoveGrace > 0 {
			n.log.Info("subscription missing from the store; its consumer stops unless it returns", "subscription", id, "in", n.cfg.RemoveGrace)
			n.missing[id] = now
			continue
		}
		if now.Sub(since) < n.cfg.RemoveGrace {
			continue
		}
		n.log.Info("subscription removed; stopping its consumer", "subscription", id)
		delete(n.missing, id)
		r.removed.Store(true)
		r.cancel()
		delete(n.runners, id)
	}
	for id, s := range want {
		if r, ok := n.runners[id]; ok {
			r.update(s)
			continue
		}
		r := newRunner(n, s)
		n.runners[id] = r
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			r.run()
			// Deleted, not merely stopping with the node: its series go
			// once nothing records into them any more.
			if r.removed.Load() && n.cfg.ForgetSubscription != nil {
				n.cfg.ForgetSubscription(id)
			}
		}()
	}
}

// runner owns the lifecycle of one subscription's group on this node: it
// restarts the group when the subscription changes or the group fails. The
// group runs on the runner's own goroutine, which a change interrupts by
// cancelling the group's context, so a subscription costs the node no
// goroutine of its own beside what its group runs: at 1,000 subscriptions
// a second one each was a thousand stacks for the collector to scan.
type runner struct {
	n      *Node
	ctx    context.Context
	cancel context.CancelFunc
	// wake has room for one signal: a newer version waits.
	wake chan struct{}
	// removed is set when the subscription was deleted.
	removed atomic.Bool

	// mu guards the fields below; run's goroutine changes sub and g,
	// update sets next and cancels the running group through stop.
	mu  sync.Mutex
	sub *subscription.Subscription
	// next is the newest version not yet taken by run, nil when none.
	next *subscription.Subscription
	g    *group
	// stop cancels the running group's context; nil while none runs.
	stop context.CancelFunc
}

func newRunner(n *Node, s *subscription.Subscription) *runner {
	ctx, cancel := context.WithCancel(context.Background())
	return &runner{n: n, ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1), sub: s}
}

// update hands the runner a newer version of its subscription; only the
// latest pending version matters. It stops the running group, if any, so
// that run starts the new version.
func (r *runner) update(s *subscription.Subscription) {
	r.mu.Lock()
	defer r.mu.Unlock()
	latest := r.sub
	if r.next != nil {
		latest = r.next
	}
	if latest.Version == s.Version {
		return
	}
	r.next = s
	if r.stop != nil {
		r.stop()
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// takeNext moves a pending version into sub and reports whether there
// was one; it returns the version to run.
func (r *runner) takeNext() (*subscription.Subscription, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.next == nil {
		return r.sub, false
	}
	r.sub, r.next = r.next, nil
	// The signal of what was just taken: a wait after this one should not
	// end for it.
	select {
	case <-r.wake:
	default:
	}
	return r.sub, true
}

func (r *runner) current() *group {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.g
}

// waitChange waits for a newer version or, when d > 0, for d; it reports
// false once the runner stops.
func (r *runner) waitChange(d time.Duration) bool {
	var timeout <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-r.ctx.Done():
		return false
	case <-r.wake:
	case <-timeout:
	}
	return true
}

func (r *runner) run() {
	log := r.n.log.With("subscription", r.sub.ID)
	// Restarts back off so that a subscription failing at once (a broker
	// down, a topic missing) neither spins nor waits forever once healed.
	restarts := backoff.MustNew(backoff.Config{Initial: time.Second, Max: 30 * time.Second})
	for r.ctx.Err() == nil {
		s, changed := r.takeNext()
		if changed {
			restarts.Reset()
		}
		if s.Paused {
			// A paused subscription has no consumer: its partitions were
			// drained, committed and released when the group stopped.
			log.Info("subscription paused", "version", s.Version)
			if !r.waitChange(0) {
				return
			}
			continue
		}
		gctx, gcancel := context.WithCancel(r.ctx)
		r.mu.Lock()
		if r.next != nil {
			// Changed again before it started.
			r.mu.Unlock()
			gcancel()
			continue
		}
		r.stop = gcancel
		r.mu.Unlock()
		g, err := newGroup(r.n, s)
		if err == nil {
			r.mu.Lock()
			r.g = g
			r.mu.Unlock()
			err = g.run(gctx)
		}
		r.mu.Lock()
		r.g, r.stop = nil, nil
		next := r.next
		r.mu.Unlock()
		gcancel()
		switch {
		case r.ctx.Err() != nil:
			return
		case next != nil:
			log.Info("subscription changed; restarting its consumer", "version", next.Version)
		default:
			wait := restarts.Next()
			log.Error("consumer stopped; restarting", "err", err, "in", wait)
			// A newer version is worth trying at once.
			if !r.waitChange(wait) {
				return
			}
		}
	}
}
