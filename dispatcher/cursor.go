package dispatcher

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/metric"

	"github.com/keyhook/keyhook/keyrange"
)

// A group is a cursor when the node reads shared (reader.go): the reader
// of its topics owns the Kafka client and the group membership, and
// hands the group the partitions it owns and the records it fetches.

// runCursor is run for a cursor: it joins its topics' reader, waits for
// ctx, then leaves it and hands its partitions over (drain, flush,
// commit, release) as run does.
func (g *group) runCursor(ctx context.Context) error {
	if err := g.awaitOwnGroupEmpty(ctx); err != nil {
		g.stopWorkers()
		g.pool.close()
		return err
	}
	if ctx.Err() != nil {
		g.stopWorkers()
		g.pool.close()
		return nil
	}
	if err := g.n.joinReader(ctx, g); err != nil {
		g.stopWorkers()
		g.pool.close()
		return err
	}
	g.n.loops.join(g)
	g.ensureDeadLetterTopics(ctx)
	g.log.Info("cursor started", "group", g.sub.GroupID(), "topics", g.sub.Topics, "ordering", g.sub.Ordering)
	<-ctx.Done()
	// Its partitions are handed over while the reader still holds them
	// (a last cursor's leaving stops the reader, whose partitions then go
	// to other nodes), then once more for any the reader was assigned
	// meanwhile.
	g.releaseAll(g.takeWorkers(nil), true)
	g.n.leaveReader(g)
	// No sync reaches the cursor any more: no handover starts after this.
	g.handovers.Wait()
	g.releaseAll(g.takeWorkers(nil), true)
	g.n.loops.leave(g)
	g.stopWorkers()
	g.pool.close()
	g.log.Info("cursor stopped")
	return nil
}

// ownGroupPoll is how often a cursor asks whether its subscription's own
// consumer group still has members.
const ownGroupPoll = 2 * time.Second

// awaitOwnGroupEmpty waits, before the cursor reads anything, until the
// subscription's own consumer group has no member: nodes that read it
// with a group of their own (a cluster moving to the shared read, node
// by node) deliver its partitions meanwhile, and both delivering would
// send records twice. Such a node hands its partitions over (drained,
// flushed, committed, released) before it leaves the group, so once the
// group is empty the cursor takes over where it stopped. It returns nil
// when ctx ends.
func (g *group) awaitOwnGroupEmpty(ctx context.Context) error {
	adm, err := g.n.adminClient()
	if err != nil {
		return fmt.Errorf("dispatcher: admin client: %w", err)
	}
	logged := false
	for {
		dctx, cancel := context.WithTimeout(ctx, startLookupTimeout)
		described, err := kadm.NewClient(adm).DescribeGroups(dctx, g.sub.GroupID())
		cancel()
		if err == nil {
			d, ok := described[g.sub.GroupID()]
			if !ok || errors.Is(d.Err, kerr.GroupIDNotFound) || d.Err == nil && len(d.Members) == 0 {
				if logged {
					g.log.Info("the subscription's own consumer group is empty; its cursor starts")
				}
				return nil
			}
			if !logged {
				g.log.Warn("nodes still read the subscription with a consumer group of their own; its cursor waits until they left", "group", g.sub.GroupID(), "members", len(d.Members))
				logged = true
			}
		} else if ctx.Err() == nil {
			g.log.Warn("cannot describe the subscription's own consumer group; will retry", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(ownGroupPoll):
		}
	}
}

// assignCursor starts a worker for each partition the reader was
// assigned in generation gen that the cursor has none for, delivering
// the key ranges of it in ranges, at its start (starts), attached to the
// shared stream when the reader's fetch (pos) is known not to be past it.
func (g *group) assignCursor(ranges map[topicPartition]keyrange.Set, gen int32, starts map[topicPartition]cursorStart, pos map[topicPartition]int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	assigned := make(map[string][]int32)
	for tp, rs := range ranges {
		if _, ok := g.workers[tp]; ok {
			continue
		}
		assigned[tp.topic] = append(assigned[tp.topic], tp.partition)
		w := newWorker(g, tp, gen, rs)
		if s, ok := starts[tp]; ok {
			w.topicID = s.topicID
			w.setBase(s.at)
			w.src.offered = s.at
			if at, ok := pos[tp]; !ok || at < 0 || s.at < at {
				w.detach("behind the reader")
			}
		} else {
			// Its start could not be read: a catch-up from the
			// reader's position would skip what is below it, so the
			// partition waits, detached, for the next assignment.
			w.src.detached = true
			w.pub.detached.Store(true)
		}
		g.workers[tp] = w
		w.start(g.wctx)
	}
	g.countRebalance("assigned", assigned)
}

// cursorStart is where a cursor starts in a partition.
type cursorStart struct {
	at      int64
	topicID string
}

// offerShared hands a fetched partition's records to its worker. It runs
// on the reader's poll and never blocks.
func (g *group) offerShared(ctx context.Context, tp topicPartition, p kgo.FetchTopicPartition) {
	g.mu.Lock()
	w := g.workers[tp]
	g.mu.Unlock()
	if w == nil {
		return
	}
	w.highWatermark.Store(p.HighWatermark)
	w.logStart.Store(p.LogStartOffset)
	g.tel.fetched.Add(ctx, int64(len(p.Records)), metric.WithAttributeSet(w.attrs))
	w.push(p.Records)
}

// commitCursor commits each worker's watermark under the subscription's
// own group id, which has no member: Kafka takes the commit without a
// generation, so it cannot fence it. What fences it is the worker's: a
// commit is sent only while the partition's ownership is confirmed by
// the tracker (its lease, renewed by flushes Redis accepted under the
// worker's epoch) and by the reader group's coordinator (its liveness),
// and what it commits is a watermark the tracker accepted under that
// epoch. A node that lost the partition stops committing a heartbeat
// interval before another can be given it (Config.lease).
func (g *group) commitCursor(ws []*worker) {
	g.commitMu.Lock()
	defer g.commitMu.Unlock()
	var offsets []commitOffset
	want := make(map[topicPartition]*worker)
	for _, w := range ws {
		wm, ok := w.commitCandidate()
		if !ok || !w.owned() {
			continue
		}
		id, _ := parseTopicID(w.topicID)
		offsets = append(offsets, commitOffset{tp: w.tp, at: wm, topicID: id})
		want[w.tp] = w
	}
	if len(want) == 0 {
		return
	}
	cl, err := g.n.commits.client(g.sub.GroupID())
	if err != nil {
		g.commitErrors.Add(1)
		g.countError("commit")
		g.log.Warn("commit failed", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	started := time.Now()
	defer func() { g.tel.commitTime.Record(ctx, time.Since(started).Seconds(), metric.WithAttributeSet(g.attrs)) }()
	res, err := commitOffsets(ctx, cl, g.sub.GroupID(), offsets)
	if err == nil {
		for _, o := range offsets {
			perr, ok := res[o.tp]
			switch {
			case !ok:
				err = errors.Join(err, fmt.Errorf("%s/%d: %w", o.tp.topic, o.tp.partition, kerr.UnknownTopicOrPartition))
			case perr != nil:
				err = errors.Join(err, fmt.Errorf("%s/%d: %w", o.tp.topic, o.tp.partition, perr))
			default:
				want[o.tp].committedTo(o.at)
			}
		}
	}
	if err != nil {
		g.commitErrors.Add(1)
		g.countError("commit")
		g.log.Warn("commit failed", "err", err)
	}
}

// parseTopicID reads a topic ID as the assignment wrote it
// (kadm.TopicID.String); false when it is unknown.
func parseTopicID(s string) (kadm.TopicID, bool) {
	var id kadm.TopicID
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != len(id) {
		return id, false
	}
	copy(id[:], b)
	return id, id != kadm.TopicID{}
}

// readerGroup is the consumer group of the group's reader, "" none. It
// is derived, not read from rd: stats read it while the cursor joins.
// newGroup derives it once (readerID); a group built otherwise, as in a
// test, derives it on each call.
func (g *group) readerGroup() string {
	if !g.n.cfg.SharedRead {
		return ""
	}
	if g.readerID != "" {
		return g.readerID
	}
	return readerGroupID(g.sub.Topics)
}
