package dispatcher

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/tracking"
)

// Where an assigned partition starts.
//
// Every group resets to the earliest offset: a subscription's start
// position is committed for its group when it is created (control's
// StartResolver), so a partition without a commit is one nobody has read
// yet, added to a topic later or of a topic created later, and its first
// record is the right start. The group's commit is then checked against
// what is known before the partition is consumed:
//
//   - no commit, but tracking state of the same topic with a watermark:
//     the group's offsets expired (offsets.retention) while the tracking
//     state survived; resume at the tracked watermark instead of
//     delivering the whole log again (offsets_expired);
//   - a commit while the tracking state belongs to another topic ID: the
//     topic was deleted and created again under the same name, and the
//     commit is the old topic's; start at the log start (topic_recreated);
//   - a commit, or a tracked watermark, above the log end or below the log
//     start: start at the log start rather than let the reset policy or a
//     stale position skip records (out_of_range).
//
// Each is logged at warn and counted in keyhook.partition.start_reset.

// partitionStart is what was read about an assigned partition before its
// offsets were fetched.
type partitionStart struct {
	// topicID is the topic's Kafka ID (KIP-516) now, "" unknown.
	topicID string
	// tracked is the partition's tracking state as the previous owners
	// left it; nil when there is none or it could not be read.
	tracked *tracking.PartitionState
}

// startLookupTimeout bounds each Kafka or Redis read made to decide where
// partitions start. A failed read leaves the group's commit as it is.
const startLookupTimeout = 5 * time.Second

// learnStarts reads the topic IDs and the tracking states of newly
// assigned partitions. It runs in OnPartitionsAssigned: before the
// offsets are fetched and before any worker claims, so the state is read
// as the previous owners left it.
func (g *group) learnStarts(cl *kgo.Client, assigned map[string][]int32) map[topicPartition]partitionStart {
	out := make(map[topicPartition]partitionStart)
	if len(assigned) == 0 {
		return out
	}
	ctx, cancel := context.WithTimeout(g.wctx, startLookupTimeout)
	defer cancel()
	topics := make([]string, 0, len(assigned))
	var pks []tracking.PartitionKey
	for t, ps := range assigned {
		topics = append(topics, t)
		for _, p := range ps {
			pks = append(pks, g.partitionKey(topicPartition{t, p}))
		}
	}
	ids := make(map[string]string)
	md, err := kadm.NewClient(cl).Metadata(ctx, topics...)
	if err != nil {
		g.log.Warn("cannot read topic IDs; tracking state is not checked against them", "topics", topics, "err", err)
	}
	for t, d := range md.Topics {
		if d.Err == nil && d.ID != (kadm.TopicID{}) {
			ids[t] = d.ID.String()
		}
	}
	states, err := g.n.tracker.Load(ctx, pks)
	if err != nil {
		g.countError("load")
		g.log.Warn("cannot read tracking state at assignment", "err", err)
	}
	for _, pk := range pks {
		ps := partitionStart{topicID: ids[pk.Topic]}
		if st, ok := states[pk]; ok {
			ps.tracked = &st
		}
		out[topicPartition{pk.Topic, pk.Partition}] = ps
	}
	return out
}

// startOffsets checks the group's fetched offsets against the log and the
// tracking state read at assignment, and returns the offsets to start
// from. A partition whose commit holds keeps it, and its worker learns it.
func (g *group) startOffsets(ctx context.Context, offs map[string]map[int32]kgo.Offset) map[string]map[int32]kgo.Offset {
	topics := make([]string, 0, len(offs))
	for t := range offs {
		topics = append(topics, t)
	}
	ctx, cancel := context.WithTimeout(ctx, startLookupTimeout)
	defer cancel()
	adm := kadm.NewClient(g.client())
	starts, errS := adm.ListStartOffsets(ctx, topics...)
	ends, errE := adm.ListEndOffsets(ctx, topics...)
	if err := errors.Join(errS, errE); err != nil {
		g.log.Warn("cannot read log start and end offsets; partitions start at their commit unchecked", "err", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for topic, ps := range offs {
		for p, o := range ps {
			tp := topicPartition{topic, p}
			info := g.starts[tp]
			delete(g.starts, tp)
			logStart, okS := starts.Lookup(topic, p)
			logEnd, okE := ends.Lookup(topic, p)
			bounds := okS && okE && logStart.Err == nil && logEnd.Err == nil
			at, reason, detail := decideStart(o.EpochOffset().Offset, info, bounds, logStart.Offset, logEnd.Offset)
			if reason != "" {
				g.countStartReset(tp, reason)
				g.log.Warn("partition does not start at the group's commit", append([]any{"topic", topic, "partition", p,
					"reason", reason, "start", at, "log_start", logStart.Offset, "log_end", logEnd.Offset}, detail...)...)
				ps[p] = kgo.NewOffset().At(at)
				continue
			}
			if w := g.workers[tp]; w != nil {
				w.setBase(o.EpochOffset().Offset)
			}
		}
	}
	return offs
}

// decideStart returns where a partition starts when not at committed
// (negative: no commit), and why; reason "" keeps the commit or the reset
// policy. bounds says whether logStart and logEnd are known.
func decideStart(committed int64, info partitionStart, bounds bool, logStart, logEnd int64) (at int64, reason string, detail []any) {
	tr := info.tracked
	otherTopic := tr != nil && tr.TopicID != "" && info.topicID != "" && tr.TopicID != info.topicID
	inLog := func(o int64) bool { return !bounds || (o >= logStart && o <= logEnd) }
	switch {
	case committed >= 0 && otherTopic:
		if !bounds {
			logStart = 0
		}
		return logStart, resetTopicRecreated, []any{"commit", committed, "topic_id", info.topicID, "tracked_topic_id", tr.TopicID}
	case committed >= 0 && !inLog(committed):
		return logStart, resetOutOfRange, []any{"commit", committed}
	case committed >= 0:
		return 0, "", nil
	case tr == nil || otherTopic || max(tr.Watermark, tr.Committed) <= 0:
		return 0, "", nil
	}
	wm := max(tr.Watermark, tr.Committed)
	if !inLog(wm) {
		return logStart, resetOutOfRange, []any{"tracked_watermark", wm}
	}
	return wm, resetOffsetsExpired, []any{"tracked_watermark", wm}
}
