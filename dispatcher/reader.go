package dispatcher

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/keyhook/keyhook/keyrange"
	"github.com/keyhook/keyhook/tracking"
)

// The shared read (Tuning.SharedRead).
//
// A reader is one consumer group per set of topics on the node: it
// fetches each partition the group gives the node once, and offers every
// record to each subscription reading those topics, its cursors. Which
// node reads which partition is the reader group's decision (Kafka's
// membership, generations and fencing). A cursor is a subscription's
// group without a Kafka client of its own: it keeps its partition
// machines, its tracking state and epochs in Redis, its dead letters and
// its commits under its own group id (keyhook-<id>, committed with no
// member, so lag tools still see each subscription; see group.commit).
//
// With more nodes than partitions, nodes share a partition by key range
// (readshare.go).
//
// A cursor that cannot take what the reader fetched (its window is full,
// its claim is still not in after claimBacklog records or what the
// node's budget holds, it starts behind the reader) leaves the shared
// stream: what it did not take it reads again with a client of its own
// from where it stopped (catchup.go), and it rejoins once that client
// reached the reader's position. So a lagging cursor never holds the
// read, and records are fetched once while cursors keep up.

// readerGroupID is the consumer group of the reader of topics: one per
// topic set, the same on every node.
func readerGroupID(topics []string) string {
	sum := sha256.Sum256([]byte(topicSetKey(topics)))
	return "keyhook-read-" + hex.EncodeToString(sum[:8])
}

// topicSetKey names a set of topics whatever their order.
func topicSetKey(topics []string) string {
	ts := slices.Clone(topics)
	slices.Sort(ts)
	return strings.Join(slices.Compact(ts), "\x00")
}

// reader fetches a topic set's partitions the node owns, once, for every
// cursor reading them.
type reader struct {
	n       *Node
	groupID string
	topics  []string
	log     *slog.Logger
	attrs   attribute.Set
	// live is the reader group's membership as the coordinator confirms
	// it; the cursors' workers deliver only while it holds.
	live *liveness
	// cl is set by newReader and, earlier, by the first group callback
	// (the client joins inside kgo.NewClient).
	cl atomic.Pointer[kgo.Client]

	// ops serialises the reader group's callbacks with cursors joining
	// and leaving, so a cursor's workers match the partitions owned.
	ops sync.Mutex

	// mu guards cursors, joining, owned, pos and sh.
	mu      sync.Mutex
	cursors map[*group]struct{}
	// joining are the cursors waiting to attach (enqueue), attached
	// together by whichever of them holds ops first (attachJoining).
	joining []*group
	// owned is the generation each owned partition was assigned in.
	owned map[topicPartition]int32
	// pos is where the reader's fetch of each owned partition is: one
	// past the last offset it handed out, or where it starts.
	pos map[topicPartition]*atomic.Int64
	// sh is the sharing of partitions by key range.
	sh readerShares

	cancel context.CancelFunc
	// loops are the poll, the settler (readshare.go) and the committer.
	loops sync.WaitGroup

	// member is the member id last remembered (rememberMember), at
	// memberAt; memberFailing is set while remembering fails. Owned by
	// the committer.
	member        string
	memberAt      time.Time
	memberFailing bool
}

// newReader builds the reader of topics with its first cursor, which is
// there before the client joins the group (its callbacks may run before
// kgo.NewClient returns).
func newReader(n *Node, topics []string, first *group) (*reader, error) {
	r := &reader{
		n: n, topics: slices.Clone(topics),
		cursors: map[*group]struct{}{first: {}},
		owned:   make(map[topicPartition]int32),
		pos:     make(map[topicPartition]*atomic.Int64),
		sh:      newReaderShares(),
	}
	gid := readerGroupID(topics)
	r.groupID = gid
	r.log = n.log.With("reader", gid)
	r.attrs = attribute.NewSet(attribute.String("reader", gid))
	r.live = newLiveness(n.cfg.lease(), nil)
	balancers, err := r.readerBalancers()
	if err != nil {
		return nil, fmt.Errorf("dispatcher: reader: %w", err)
	}
	n.removePredecessor(gid, r.log)
	opts := n.memberOpts(gid, r.topics, kgo.NewOffset().AtStart(), balancers, memberCallbacks{
		assigned: r.onAssigned, revoked: r.onRevoked, lost: r.onLost, offsets: r.startOffsets, live: r.live,
	})
	first.rd, first.live = r, r.live
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("dispatcher: reader client: %w", err)
	}
	r.cl.CompareAndSwap(nil, cl)
	return r, nil
}

// start runs the reader's poll, its settler and its committer until
// stop.
func (r *reader) start() {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.loops.Go(func() { r.run(ctx) })
	r.loops.Go(func() { r.settler(ctx) })
	r.loops.Go(func() { r.committer(ctx) })
}

// stop ends the poll, hands every owned partition over (the cursors left
// before: they released their own), commits the reader group's offsets
// and leaves the group.
func (r *reader) stop() {
	r.cancel()
	r.loops.Wait()
	r.commit()
	r.client().Close()
}

func (r *reader) run(ctx context.Context) {
	r.log.Info("reader started", "topics", r.topics)
	for {
		fetches := r.client().PollRecords(ctx, 10000)
		if fetches.IsClientClosed() || ctx.Err() != nil {
			r.client().AllowRebalance()
			return
		}
		fetches.EachError(func(topic string, p int32, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			r.log.Warn("fetch error", "topic", topic, "partition", p, "err", err)
		})
		r.mu.Lock()
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			tp := topicPartition{p.Topic, p.Partition}
			r.n.tel.readerFetch.Add(ctx, int64(len(p.Records)), metric.WithAttributeSet(r.attrs))
			if pos := r.pos[tp]; pos != nil {
				pos.Store(p.Records[len(p.Records)-1].Offset + 1)
			}
			for g := range r.cursors {
				g.offerShared(ctx, tp, p)
			}
		})
		r.mu.Unlock()
		r.client().AllowRebalance()
	}
}

// committer commits the reader group's offsets every commit interval
// until ctx ends, and remembers the node's member of the group. It is a loop of its own, not a step of the poll: an
// OffsetCommit waits for the group coordinator, which under the cursors'
// own commits answered in 50 to 500 ms, and the poll held that long
// delayed every subscription's next records.
func (r *reader) committer(ctx context.Context) {
	t := time.NewTicker(r.n.cfg.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.commit()
			r.rememberMember(ctx)
		}
	}
}

// position is where the reader's fetch of tp is, -1 when it does not own
// it.
func (r *reader) position(tp topicPartition) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.pos[tp]; p != nil {
		return p.Load()
	}
	return -1
}

// positions returns where the reader's fetch of each owned partition is.
// r.mu is held.
func (r *reader) positions() map[topicPartition]int64 {
	out := make(map[topicPartition]int64, len(r.pos))
	for tp, p := range r.pos {
		out[tp] = p.Load()
	}
	return out
}

// enqueue makes g a cursor waiting to attach: the reader is not empty
// from now on. The node calls it holding readersMu, then attachJoining
// without it.
func (r *reader) enqueue(g *group) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.joining = append(r.joining, g)
}

// attachJoining makes the cursors waiting to attach cursors of the
// reader: they get workers for the partitions the reader owns now, and
// for those assigned later. Whoever holds ops first attaches every cursor
// waiting then, with one lookup of their starts; one whose cursor an
// earlier holder attached returns at once. One at a time, a node
// restarting with 1,000 subscriptions made a lookup of five round trips
// per cursor, one after another, and on a full machine its cursors
// started over four minutes.
func (r *reader) attachJoining(ctx context.Context) {
	r.ops.Lock()
	defer r.ops.Unlock()
	r.mu.Lock()
	batch := r.joining
	r.joining = nil
	owned := make(map[string][]int32)
	var gen int32
	for tp, gn := range r.owned {
		owned[tp.topic] = append(owned[tp.topic], tp.partition)
		gen = max(gen, gn)
	}
	r.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	var starts map[*group]map[topicPartition]cursorStart
	if len(owned) > 0 {
		// Not the caller's context alone: the lookup serves every cursor
		// of the batch (it has its own deadline).
		starts = r.cursorStarts(context.WithoutCancel(ctx), batch, owned)
	}
	// The workers take the key ranges of now and the cursors join in one
	// step: a sync (onSync) either came before or sees them.
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range batch {
		if len(owned) > 0 {
			r.assignCursor(g, owned, gen, starts[g])
		}
		r.cursors[g] = struct{}{}
	}
}

// assignCursor gives g a worker for each partition of assigned it
// delivers keys of (readerShares.cursorRanges). r.mu is held.
func (r *reader) assignCursor(g *group, assigned map[string][]int32, gen int32, starts map[topicPartition]cursorStart) {
	ranges := make(map[topicPartition]keyrange.Set)
	for topic, ps := range assigned {
		for _, p := range ps {
			tp := topicPartition{topic, p}
			if rs, ok := r.sh.cursorRanges(g, tp); ok {
				ranges[tp] = rs
			}
		}
	}
	g.assignCursor(ranges, gen, starts, r.positions())
}

// detach takes g off the reader; its caller releases g's workers.
func (r *reader) detach(g *group) {
	r.ops.Lock()
	defer r.ops.Unlock()
	r.mu.Lock()
	delete(r.cursors, g)
	r.mu.Unlock()
}

// cursorsNow returns the attached cursors.
func (r *reader) cursorsNow() []*group {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*group, 0, len(r.cursors))
	for g := range r.cursors {
		out = append(out, g)
	}
	return out
}

// empty reports whether no cursor is attached or waiting to attach.
func (r *reader) empty() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.cursors) == 0 && len(r.joining) == 0
}

func (r *reader) client() *kgo.Client { return r.cl.Load() }

// onAssigned decides, for newly assigned partitions, where each cursor
// starts (cursorStarts) and where the reader fetches from: the lowest
// start of the cursors near the front (readerStarts). A cursor further
// behind starts detached, on a catch-up of its own, so one new
// subscription reading from the earliest offset does not hold the others
// back. startOffsets then fetches from there.
func (r *reader) onAssigned(ctx context.Context, cl *kgo.Client, assigned map[string][]int32) {
	r.cl.CompareAndSwap(nil, cl)
	r.ops.Lock()
	defer r.ops.Unlock()
	_, gen := cl.GroupMetadata()
	cursors := r.cursorsNow()
	starts := r.cursorStarts(ctx, cursors, assigned)
	r.mu.Lock()
	defer r.mu.Unlock()
	for g, s := range starts {
		for tp := range s {
			if _, ok := r.sh.cursorRanges(g, tp); !ok {
				delete(s, tp) // no worker of g's reads it here
			}
		}
	}
	front := readerStarts(starts, r.n.cfg.MaxWindow)
	for topic, ps := range assigned {
		for _, p := range ps {
			tp := topicPartition{topic, p}
			r.owned[tp] = gen
			pos := new(atomic.Int64)
			pos.Store(-1)
			if at, ok := front[tp]; ok {
				pos.Store(at)
			}
			r.pos[tp] = pos
		}
	}
	for _, g := range cursors {
		r.assignCursor(g, assigned, gen, starts[g])
	}
	r.log.Info("partitions assigned", "partitions", assigned, "generation", gen)
}

// startOffsets fetches each newly assigned partition from where
// onAssigned decided; one no cursor had a start for keeps the reader
// group's commit.
func (r *reader) startOffsets(_ context.Context, offs map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	for t, ps := range offs {
		for p := range ps {
			if at := r.position(topicPartition{t, p}); at >= 0 {
				ps[p] = kgo.NewOffset().At(at)
			}
		}
	}
	return offs, nil
}

// readerStarts picks where the reader fetches each partition from: the
// lowest cursor start within window of the highest.
func readerStarts(starts map[*group]map[topicPartition]cursorStart, window int64) map[topicPartition]int64 {
	hi := make(map[topicPartition]int64)
	for _, s := range starts {
		for tp, c := range s {
			if cur, ok := hi[tp]; !ok || c.at > cur {
				hi[tp] = c.at
			}
		}
	}
	out := make(map[topicPartition]int64, len(hi))
	for _, s := range starts {
		for tp, c := range s {
			if c.at < hi[tp]-window {
				continue
			}
			if cur, ok := out[tp]; !ok || c.at < cur {
				out[tp] = c.at
			}
		}
	}
	return out
}

// cursorStarts reads, for each cursor, its group's commit of each
// partition and the tracking state, and decides where it starts as a
// group of its own would (decideStart), in a few round trips for all.
func (r *reader) cursorStarts(ctx context.Context, cursors []*group, assigned map[string][]int32) map[*group]map[topicPartition]cursorStart {
	out := make(map[*group]map[topicPartition]cursorStart, len(cursors))
	if len(cursors) == 0 || len(assigned) == 0 {
		return out
	}
	ctx, cancel := context.WithTimeout(ctx, startLookupTimeout)
	defer cancel()
	adm := kadm.NewClient(r.client())
	topics := make([]string, 0, len(assigned))
	for t := range assigned {
		topics = append(topics, t)
	}
	ids := make(map[string]string)
	md, err := adm.Metadata(ctx, topics...)
	if err != nil {
		r.log.Warn("cannot read topic IDs; tracking state is not checked against them", "err", err)
	}
	for t, d := range md.Topics {
		if d.Err == nil && d.ID != (kadm.TopicID{}) {
			ids[t] = d.ID.String()
		}
	}
	logStarts, errS := adm.ListStartOffsets(ctx, topics...)
	logEnds, errE := adm.ListEndOffsets(ctx, topics...)
	if err := errors.Join(errS, errE); err != nil {
		r.log.Warn("cannot read log start and end offsets; cursors start at their commit unchecked", "err", err)
	}
	groups := make([]string, len(cursors))
	var pks []tracking.PartitionKey
	for i, g := range cursors {
		groups[i] = g.sub.GroupID()
		for t, ps := range assigned {
			for _, p := range ps {
				pks = append(pks, g.partitionKey(topicPartition{t, p}))
			}
		}
	}
	commits := adm.FetchManyOffsets(ctx, groups...)
	states, err := r.n.tracker.Load(ctx, pks)
	if err != nil {
		r.log.Warn("cannot read tracking state at assignment", "err", err)
	}
	for _, g := range cursors {
		s := make(map[topicPartition]cursorStart)
		resp := commits[g.sub.GroupID()]
		if errors.Is(resp.Err, kerr.GroupIDNotFound) {
			// No commit yet (some brokers answer so for a group never
			// committed to).
			resp.Err = nil
		}
		if resp.Err != nil {
			g.log.Warn("cannot read the subscription's commits; its partitions start as if it had none", "err", resp.Err)
		}
		for t, ps := range assigned {
			for _, p := range ps {
				tp := topicPartition{t, p}
				committed := int64(-1)
				if o, ok := resp.Fetched.Lookup(t, p); ok && o.Err == nil && resp.Err == nil {
					committed = o.At
				}
				info := partitionStart{topicID: ids[t]}
				if st, ok := states[g.partitionKey(tp)]; ok {
					info.tracked = &st
				}
				ls, okS := logStarts.Lookup(t, p)
				le, okE := logEnds.Lookup(t, p)
				bounds := okS && okE && ls.Err == nil && le.Err == nil
				at, reason, detail := decideStart(committed, info, bounds, ls.Offset, le.Offset)
				switch {
				case reason != "":
					g.countStartReset(tp, reason)
					g.log.Warn("partition does not start at the subscription's commit", append([]any{"topic", t, "partition", p,
						"reason", reason, "start", at, "log_start", ls.Offset, "log_end", le.Offset}, detail...)...)
				case committed >= 0:
					at = committed
				case bounds:
					// No commit: the partition was never read (start.go).
					at = ls.Offset
				default:
					at = 0
				}
				s[tp] = cursorStart{at: at, topicID: ids[t]}
			}
		}
		out[g] = s
	}
	return out
}

func (r *reader) onRevoked(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
	r.let(revoked, true)
}

func (r *reader) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	r.let(lost, false)
}

// let hands partitions over: every cursor releases its workers of them
// (drained, flushed, committed when graceful), then the reader commits
// the lowest of the cursors' commits for its own group.
func (r *reader) let(tps map[string][]int32, graceful bool) {
	r.ops.Lock()
	defer r.ops.Unlock()
	var wg sync.WaitGroup
	for _, g := range r.cursorsNow() {
		wg.Go(func() {
			if graceful {
				g.countRebalance("revoked", tps)
			} else {
				g.countRebalance("lost", tps)
			}
			g.releaseAll(g.takeWorkers(tps), graceful)
		})
	}
	wg.Wait()
	r.forget(tps)
	if graceful {
		r.commit()
	}
	r.mu.Lock()
	for t, ps := range tps {
		for _, p := range ps {
			tp := topicPartition{t, p}
			delete(r.owned, tp)
			delete(r.pos, tp)
		}
	}
	r.mu.Unlock()
	r.log.Info("partitions released", "partitions", tps, "graceful", graceful)
}

// commit commits, for the reader group, the lowest commit of its cursors
// in each owned partition whose hash 0 the node holds (one sharer
// commits), so that its lag is the furthest behind of the subscriptions
// reading the topics (what an autoscaler reads). Kafka fences it by the
// reader group's generation.
func (r *reader) commit() {
	low := make(map[topicPartition]int64)
	r.mu.Lock()
	mine := make(map[topicPartition]bool, len(r.owned))
	for tp := range r.owned {
		mine[tp] = r.sh.commits(tp)
	}
	r.mu.Unlock()
	for _, g := range r.cursorsNow() {
		for _, w := range g.snapshotWorkers() {
			if !mine[w.tp] {
				continue // another sharer holds hash 0 and commits
			}
			c := w.committed.Load()
			if cur, ok := low[w.tp]; !ok || c < cur {
				low[w.tp] = c
			}
		}
	}
	offsets := make(map[string]map[int32]kgo.EpochOffset)
	for tp, c := range low {
		if c < 0 {
			continue
		}
		if offsets[tp.topic] == nil {
			offsets[tp.topic] = make(map[int32]kgo.EpochOffset)
		}
		offsets[tp.topic][tp.partition] = kgo.EpochOffset{Epoch: -1, Offset: c}
	}
	if len(offsets) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r.client().CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, _ *kmsg.OffsetCommitResponse, err error) {
		if err != nil && !errors.Is(err, context.Canceled) {
			r.log.Warn("reader commit failed", "err", err)
		}
	})
}
