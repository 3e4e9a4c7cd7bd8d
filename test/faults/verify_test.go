package faults

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/keyhook/keyhook/internal/verify"
)

// subject is what the verifier checks for this scenario: its topic, group
// and sink, what producers were told is committed, and the duplicates its
// failures allow so far.
func (c *cluster) subject() verify.Subject {
	c.mu.Lock()
	defer c.mu.Unlock()
	return verify.Subject{
		Brokers: c.brokers, Adm: c.adm,
		Topic: c.topic, Partitions: int32(c.cfg.partitions), DeadLetterTopic: c.dlq,
		Group: c.sub.GroupID(), Sink: c.sink, Sampler: c.sampler,
		KeyOrder: true,
		Expected: maps.Clone(c.expected),
		Bound:    c.bound,
		Failed:   maps.Clone(c.failed),
	}
}

// finish ends a scenario: it waits until the producer's records are all
// acked and the group's commit reached the log end of every partition,
// stops the sampler, and verifies the guarantees (package verify). It
// prints the scenario's summary line and returns what it found for
// further checks.
func (c *cluster) finish() verify.Outcome {
	t := c.t
	t.Helper()
	ends, commits, err := c.subject().WaitSettled(settleTimeout)
	if err != nil {
		c.reportUnsettled(err, ends, commits)
	}
	c.stopBackground()
	o := c.subject().Check(t, ends)
	t.Logf("scenario=%s records=%d lost=%d duplicates=%d (bound %d) max_commit_overshoot=%d key_overlaps=%d (after a failure %d) wall=%.1fs",
		c.name, o.Records, o.Lost, o.Duplicates, o.Bound, o.Overshoot, o.Overlaps, o.FailureOverlaps, time.Since(c.started).Seconds())
	for _, n := range c.boundNotes {
		t.Logf("  bound: %s", n)
	}
	polls, failures, observed := c.sampler.Stats()
	t.Logf("  commit sampler: %d polls (%d failed: group not yet created or broker away), %d commits observed",
		polls, failures, observed)
	return o
}

// reportUnsettled says where each partition stands, with its tracking
// state, when the commits did not reach the log ends in time.
func (c *cluster) reportUnsettled(err error, ends, commits map[int32]int64) {
	var b strings.Builder
	fmt.Fprintf(&b, "%v:", err)
	states, _ := c.tracker.Load(context.Background(), c.partitionKeys())
	for p := range int32(c.cfg.partitions) {
		st := states[c.partitionKeys()[p]]
		fmt.Fprintf(&b, "\n  partition %d: commit %d, log end %d; tracking: owner %q epoch %d watermark %d fetched %d pending %d in flight %d acked %v",
			p, commits[p], ends[p], st.Owner, st.Epoch, st.Watermark, st.Fetched, st.Pending, st.InFlight, st.AckedRanges)
	}
	c.t.Error(b.String())
}

// logEnds returns each partition's high watermark of topic.
func (c *cluster) logEnds(ctx context.Context, topic string) (map[int32]int64, error) {
	return verify.LogEnds(ctx, c.adm, topic)
}
