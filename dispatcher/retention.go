package dispatcher

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/metric"
)

// The retention guard. A record pending for long — behind a stuck key,
// parked, or retrying — can outlive the topic's retention. Kafka then
// deletes it: a parked record can no longer be read again, and a crash
// of its owner would leave the next one nothing to deliver. Before that,
// the guard lets it out of its key's turn: the record is dead-lettered
// with the reason when the subscription dead-letters (its key's order is
// kept for redrive, through the dead-letter topic), or delivered at once
// when dead-lettering is off. A parked record the log start passed anyway
// (size-based retention, or a guard that could not act in time) is
// counted lost and logged as an error: never skipped unnoticed.

// lostRetention is the reason of keyhook.records.lost for records
// retention deleted before they were delivered.
const lostRetention = "retention"

// errRetention ends the delivery of an expiring record of a subscription
// that dead-letters: it is written to the dead-letter topic with this
// reason before retention deletes it.
var errRetention = errors.New("the record was about to be deleted by the topic's retention while its key waited; dead-lettered out of its key's turn")

// retentionRefresh is how often the topics' retention is read again (by
// the node's topics loop, loops.go).
const retentionRefresh = time.Minute

// guardEvery paces a partition's retention checks: at most once a
// second, and no more often than a tenth of the margin asks, at most every
// maxGuardEvery. Each check reads every pending record's time; a record
// read just after one is checked by the next, well inside its margin.
const (
	guardEvery    = time.Second
	maxGuardEvery = 30 * time.Second
)

// guardInterval is how long a check of a topic with retention waits for
// the next.
func guardInterval(retention time.Duration) time.Duration {
	return min(max(retentionMargin(retention)/10, guardEvery), maxGuardEvery)
}

// retentionMargin is how long before a record's deletion the guard acts:
// a quarter of the retention, at most six hours (well before, yet not so
// early that a short outage costs a key its order).
func retentionMargin(retention time.Duration) time.Duration {
	return min(retention/4, 6*time.Hour)
}

// readRetention reads retention.ms of topics, in one request; a topic
// without time-based retention (-1) or whose config cannot be read is
// left out, and the guard does not act on it.
func readRetention(ctx context.Context, cl *kgo.Client, topics []string) (map[string]time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rcs, err := kadm.NewClient(cl).DescribeTopicConfigs(ctx, topics...)
	if err != nil {
		return nil, err
	}
	out := make(map[string]time.Duration, len(rcs))
	for _, rc := range rcs {
		if rc.Err != nil {
			continue
		}
		for _, c := range rc.Configs {
			if c.Key != "retention.ms" {
				continue
			}
			if ms, err := strconv.ParseInt(c.MaybeValue(), 10, 64); err == nil && ms > 0 {
				out[rc.Name] = time.Duration(ms) * time.Millisecond
			}
		}
	}
	return out, nil
}

// learnTopics takes what the node's topics loop read of the
// subscription's topics: their partition count, and their retention when
// it changed.
func (g *group) learnTopics(topics map[string]*topicInfo) {
	n, known, with := 0, false, 0
	old := g.retention.Load()
	same := old != nil
	for _, name := range g.sub.Topics {
		ti := topics[name]
		if ti == nil {
			continue
		}
		known = true
		n += ti.partitions
		if ti.retention > 0 {
			with++
		}
		if same {
			was, had := (*old)[name]
			same = had == (ti.retention > 0) && was == ti.retention
		}
	}
	if n > 0 {
		g.topicPartitions.Store(int64(n))
	}
	// Nothing known yet: the guard waits for a read that succeeds.
	if !known || same && len(*old) == with {
		return
	}
	out := make(map[string]time.Duration, with)
	for _, name := range g.sub.Topics {
		if ti := topics[name]; ti != nil && ti.retention > 0 {
			out[name] = ti.retention
		}
	}
	g.setRetention(out)
}

// setRetention stores the topics' retention, and has the partitions'
// guards learn of a change.
func (g *group) setRetention(out map[string]time.Duration) {
	old := g.retention.Swap(&out)
	if old != nil && maps.Equal(*old, out) {
		return
	}
	// The partitions' guards learn of a new retention (the first one
	// above all: a claim can come before it is read) now rather than at
	// their next check, up to 30 s away. It runs on each worker's loop,
	// which owns the guard.
	for _, w := range g.snapshotWorkers() {
		w.do(func() { w.recheckRetention(time.Now()) })
	}
}

// recheckRetention runs the retention check now, whenever the last one ran.
func (w *worker) recheckRetention(now time.Time) {
	w.guard.next = time.Time{}
	w.guardRetention(now)
}

// retentionOf returns topic's time-based retention, false when it has
// none or it is not known yet.
func (g *group) retentionOf(topic string) (time.Duration, bool) {
	m := g.retention.Load()
	if m == nil {
		return 0, false
	}
	d, ok := (*m)[topic]
	return d, ok
}

// retentionGuard is when a worker's retention check runs next; only the
// loop uses it.
type retentionGuard struct {
	next time.Time
}

// guardRetention runs the partition's retention check, at most once per
// guardEvery: records about to be deleted go out of their key's turn,
// parked records the log start passed are counted lost.
func (w *worker) guardRetention(now time.Time) {
	if now.Before(w.guard.next) || !w.m.Claimed() || w.m.Stopped() {
		return
	}
	w.guard.next = now.Add(guardEvery)
	ctx := context.Background()
	if ls := w.logStart.Load(); ls > 0 {
		if lost := w.m.ParkedLostBelow(ls); lost > 0 {
			w.g.tel.lost.Add(ctx, lost, metric.WithAttributes(attrSubscription.String(w.g.sub.ID), attrReason.String(lostRetention)))
			w.log.Error("parked records deleted by the topic's retention before they could be read again; they are lost",
				"records", lost, "log_start", ls)
		}
	}
	ret, ok := w.g.retentionOf(w.tp.topic)
	if !ok {
		w.pub.guardAt.Store(0)
		return
	}
	w.guard.next = now.Add(guardInterval(ret))
	cutoff := now.Add(-(ret - retentionMargin(ret)))
	// With nothing pending, the headroom is a record's read now, so the
	// gauge is there for every partition of a topic with time-based
	// retention.
	oldest := w.m.OldestTime()
	if oldest.IsZero() {
		oldest = now
	}
	w.pub.guardAt.Store(oldest.Add(ret - retentionMargin(ret)).UnixNano())
	if n := w.m.Expire(cutoff, 10000); n > 0 {
		// Those out learn of it through the outbox.
		w.outbox.expired()
		w.g.tel.expiring.Add(ctx, int64(n), metric.WithAttributeSet(w.attrs))
		action := "dead-lettered"
		if w.g.sub.DeadLetterTopicFor(w.tp.topic) == "" {
			action = "delivered out of their key's turn"
		}
		w.log.Warn("pending records about to be deleted by the topic's retention; they go now, "+action,
			"records", n, "retention", ret, "older_than", cutoff)
	}
}
