package faults

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/internal/verify"
)

// subject is what the verifier checks for the first subscription.
func (c *cluster) subject() verify.Subject { return c.subjectOf(0) }

// subjectOf is what the verifier checks for subscription i: its topic,
// group and sink, what producers were told is committed, and the
// duplicates the scenario's failures allow it so far.
func (c *cluster) subjectOf(i int) verify.Subject {
	c.mu.Lock()
	defer c.mu.Unlock()
	return verify.Subject{
		Brokers: c.brokers, Adm: c.adm,
		Topic: c.topic, Partitions: int32(c.cfg.partitions), DeadLetterTopic: c.dlq,
		Group: c.subs[i].GroupID(), Sink: c.sinks[i], Sampler: c.samplers.For(c.subs[i].GroupID()),
		KeyOrder: true,
		Expected: maps.Clone(c.expected),
		Bound:    c.bounds[i],
		Failed:   maps.Clone(c.failed),
	}
}

// finish ends a scenario: it waits until the producer's records are all
// acked and every subscription's commit reached the log end of every
// partition, stops the sampler, and verifies the guarantees (package
// verify) for each subscription apart. It prints the scenario's summary
// line and returns what it found for further checks: with several
// subscriptions, the sums over them (the fewest records, the largest
// overshoot), and the first one's data and dead letters.
func (c *cluster) finish() verify.Outcome {
	t := c.t
	t.Helper()
	deadline := time.Now().Add(settleTimeout)
	var ends map[int32]int64
	for i := range c.subs {
		e, commits, err := c.subjectOf(i).WaitSettled(max(time.Until(deadline), time.Second))
		if err != nil {
			c.reportUnsettled(i, err, e, commits)
		}
		if ends == nil {
			ends = e
		}
	}
	c.stopBackground()
	var o verify.Outcome
	for i := range c.subs {
		tb := testing.TB(t)
		if len(c.subs) > 1 {
			tb = prefixed{t, fmt.Sprintf("subscription %d (%s): ", i, c.subs[i].Name)}
		}
		oi := c.subjectOf(i).Check(tb, ends)
		if len(c.subs) > 1 {
			t.Logf("  subscription %d: records=%d lost=%d duplicates=%d (bound %d) max_commit_overshoot=%d key_overlaps=%d (after a failure %d)",
				i, oi.Records, oi.Lost, oi.Duplicates, oi.Bound, oi.Overshoot, oi.Overlaps, oi.FailureOverlaps)
		}
		if oi.Duplicates > oi.Bound {
			for _, d := range duplicated(c.sinks[i].Deliveries(), 3) {
				t.Logf("  subscription %d: delivered twice: %s", i, d)
			}
		}
		if oi.Overlaps > 0 {
			// Within the bound they pass; name them, since two live
			// nodes with one key in flight is what a scenario looks for.
			plain, _ := verify.ClassifyOverlaps(c.sinks[i].KeyOverlaps(), c.failedNow())
			for _, ov := range plain[:min(len(plain), 3)] {
				t.Logf("  subscription %d: overlap between live nodes: %v", i, ov)
			}
		}
		if i == 0 {
			o = oi
			continue
		}
		o.Records = min(o.Records, oi.Records)
		o.Lost += oi.Lost
		o.Duplicates += oi.Duplicates
		o.Bound += oi.Bound
		o.Overshoot = max(o.Overshoot, oi.Overshoot)
		o.Overlaps += oi.Overlaps
		o.FailureOverlaps += oi.FailureOverlaps
	}
	t.Logf("scenario=%s subscriptions=%d records=%d lost=%d duplicates=%d (bound %d) max_commit_overshoot=%d key_overlaps=%d (after a failure %d) wall=%.1fs",
		c.name, len(c.subs), o.Records, o.Lost, o.Duplicates, o.Bound, o.Overshoot, o.Overlaps, o.FailureOverlaps, time.Since(c.started).Seconds())
	for _, n := range c.boundNotes {
		t.Logf("  bound: %s", n)
	}
	polls, failures, observed := 0, 0, 0
	for _, sub := range c.subs {
		p, f, n := c.samplers.For(sub.GroupID()).Stats()
		polls, failures, observed = polls+p, failures+f, observed+n
	}
	t.Logf("  commit sampler: %d polls (%d failed: group not yet created or broker away), %d commits observed",
		polls, failures, observed)
	return o
}

// failedNow returns the processes killed or stopped so far.
func (c *cluster) failedNow() map[string]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.failed)
}

// prefixed names the subscription in every failure the verifier reports.
type prefixed struct {
	testing.TB
	prefix string
}

func (p prefixed) Errorf(format string, args ...any) {
	p.TB.Helper()
	p.TB.Errorf(p.prefix+format, args...)
}

func (p prefixed) Fatalf(format string, args ...any) {
	p.TB.Helper()
	p.TB.Fatalf(p.prefix+format, args...)
}

func (p prefixed) Logf(format string, args ...any) {
	p.TB.Helper()
	p.TB.Logf(p.prefix+format, args...)
}

// reportUnsettled says where each partition of subscription i stands,
// with its tracking state, when its commits did not reach the log ends in
// time.
func (c *cluster) reportUnsettled(i int, err error, ends, commits map[int32]int64) {
	var b strings.Builder
	fmt.Fprintf(&b, "subscription %d (%s): %v:", i, c.subs[i].Name, err)
	pks := c.partitionKeysOf(c.subs[i])
	states, _ := c.tracker.Load(context.Background(), pks)
	for p := range int32(c.cfg.partitions) {
		st := states[pks[p]]
		fmt.Fprintf(&b, "\n  partition %d: commit %d, log end %d; tracking: owner %q epoch %d watermark %d fetched %d pending %d in flight %d acked %v",
			p, commits[p], ends[p], st.Owner, st.Epoch, st.Watermark, st.Fetched, st.Pending, st.InFlight, st.AckedRanges)
	}
	c.t.Error(b.String())
}

// logEnds returns each partition's high watermark of topic.
func (c *cluster) logEnds(ctx context.Context, topic string) (map[int32]int64, error) {
	return verify.LogEnds(ctx, c.adm, topic)
}

// duplicated describes up to n records acked more than once at a sink:
// each of their requests, by whom, when.
func duplicated(ds []testutil.Delivery, n int) []string {
	type rec struct {
		p   int32
		off int64
	}
	by := make(map[rec][]testutil.Delivery)
	acked := make(map[rec]int)
	for _, d := range ds {
		k := rec{d.Partition, d.Offset}
		by[k] = append(by[k], d)
		if d.Status/100 == 2 {
			acked[k]++
		}
	}
	var out []string
	for k, ok := range acked {
		if ok < 2 || len(out) == n {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%d@%d:", k.p, k.off)
		for _, d := range by[k] {
			fmt.Fprintf(&b, " [%q status %d %s to %s]", d.Origin, d.Status, d.Start.Format("15:04:05.000"), d.End.Format("15:04:05.000"))
		}
		out = append(out, b.String())
	}
	return out
}
