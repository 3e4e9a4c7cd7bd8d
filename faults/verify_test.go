package faults

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/deadletter"
)

// offsetKey names one offset of the scenario's topic.
type offsetKey struct {
	partition int32
	offset    int64
}

// outcome is what the verifier found; scenarios check more on it.
type outcome struct {
	records    int
	lost       int
	duplicates int
	bound      int
	overshoot  int64
	// data are the committed data records of the topic (aborted records
	// and control records are not in it).
	data map[offsetKey]*kgo.Record
	// deadLetters are the records of the dead-letter topic, by the offset
	// they came from.
	deadLetters map[offsetKey]*kgo.Record
}

// finish ends a scenario: it waits until the producer's records are all
// acked and the group's commit reached the log end of every partition,
// stops the sampler, and verifies the guarantees. It prints the scenario's
// summary line and returns what it found for further checks.
func (c *cluster) finish() outcome {
	t := c.t
	t.Helper()
	ends := c.waitSettled(settleTimeout)
	c.stopBackground()
	o := c.verify(ends)
	t.Logf("scenario=%s records=%d lost=%d duplicates=%d (bound %d) max_commit_overshoot=%d wall=%.1fs",
		c.name, o.records, o.lost, o.duplicates, o.bound, o.overshoot, time.Since(c.started).Seconds())
	for _, n := range c.boundNotes {
		t.Logf("  bound: %s", n)
	}
	c.sampler.mu.Lock()
	t.Logf("  commit sampler: %d polls (%d failed: group not yet created or broker away), %d commits observed",
		c.sampler.polls, c.sampler.failures, countSamples(c.sampler.samples))
	c.sampler.mu.Unlock()
	return o
}

func countSamples(m map[int32][]commitSample) int {
	n := 0
	for _, s := range m {
		n += len(s)
	}
	return n
}

// logEnds returns each partition's high watermark, which counts control
// records (transaction markers) too.
func (c *cluster) logEnds(ctx context.Context, topic string) (map[int32]int64, error) {
	listed, err := c.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	if err := listed.Error(); err != nil {
		return nil, err
	}
	ends := make(map[int32]int64)
	listed.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset })
	return ends, nil
}

// waitSettled waits until every partition's commit equals its log end and
// returns the ends. On timeout it reports where each partition stands and
// returns the ends it last saw, so the verifier still says what is wrong.
func (c *cluster) waitSettled(timeout time.Duration) map[int32]int64 {
	t := c.t
	t.Helper()
	deadline := time.Now().Add(timeout)
	var ends, commits map[int32]int64
	var lastErr error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var err error
		ends, err = c.logEnds(ctx, c.topic)
		if err == nil {
			commits, err = c.committed(ctx)
		}
		cancel()
		lastErr = err
		if err == nil && settled(ends, commits) {
			return ends
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "commits did not reach the log end within %v (last error %v):", timeout, lastErr)
	states, _ := c.tracker.Load(context.Background(), c.partitionKeys())
	for p := range int32(faultPartitions) {
		st := states[c.partitionKeys()[p]]
		fmt.Fprintf(&b, "\n  partition %d: commit %d, log end %d; tracking: owner %q epoch %d watermark %d fetched %d pending %d in flight %d acked %v",
			p, commits[p], ends[p], st.Owner, st.Epoch, st.Watermark, st.Fetched, st.Pending, st.InFlight, st.AckedRanges)
	}
	t.Error(b.String())
	return ends
}

func settled(ends, commits map[int32]int64) bool {
	if len(ends) != faultPartitions {
		return false
	}
	for p, end := range ends {
		if c, ok := commits[p]; end > 0 && (!ok || c != end) {
			return false
		}
	}
	return true
}

// verify checks the guarantees on everything the scenario left behind.
func (c *cluster) verify(ends map[int32]int64) outcome {
	t := c.t
	t.Helper()
	o := outcome{data: make(map[offsetKey]*kgo.Record), deadLetters: make(map[offsetKey]*kgo.Record)}

	// The truth: the committed data of the log, read as keyhook reads it.
	seqs := make(map[int64]bool)
	for _, r := range c.readTopic(c.topic, ends) {
		if r.Attrs.IsControl() {
			continue
		}
		o.data[offsetKey{r.Partition, r.Offset}] = r
		seq, err := seqOf(r.Value)
		if err != nil {
			t.Errorf("partition %d offset %d: %v", r.Partition, r.Offset, err)
			continue
		}
		seqs[seq] = true
	}
	o.records = len(o.data)
	c.mu.Lock()
	var missingFromLog, unexpected []int64
	for s := range c.expected {
		if !seqs[s] {
			missingFromLog = append(missingFromLog, s)
		}
	}
	for s := range seqs {
		if !c.expected[s] {
			unexpected = append(unexpected, s)
		}
	}
	c.mu.Unlock()
	if len(missingFromLog) > 0 {
		t.Errorf("%d acknowledged records are not in the log (the broker lost them, not keyhook): %v", len(missingFromLog), head(missingFromLog))
	}
	if len(unexpected) > 0 {
		t.Errorf("%d records in the log were never acknowledged as committed to the producer (aborted data visible?): %v", len(unexpected), head(unexpected))
	}

	// Dead letters, by the offset they came from.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	dlqEnds, err := c.logEnds(ctx, c.dlq)
	cancel()
	if err != nil {
		t.Fatalf("dead-letter topic end: %v", err)
	}
	for _, r := range c.readTopic(c.dlq, dlqEnds) {
		p, err1 := strconv.ParseInt(header(r, deadletter.HeaderPartition), 10, 32)
		off, err2 := strconv.ParseInt(header(r, deadletter.HeaderOffset), 10, 64)
		if err1 != nil || err2 != nil || header(r, deadletter.HeaderTopic) != c.topic {
			t.Errorf("dead letter at offset %d names no source offset of %s: headers %v", r.Offset, c.topic, r.Headers)
			continue
		}
		k := offsetKey{int32(p), off}
		if _, dup := o.deadLetters[k]; !dup {
			o.deadLetters[k] = r
		}
	}

	// When each record was first acked at the sink; and every delivery
	// must be a committed data record, as it is in the log.
	firstAck := make(map[offsetKey]time.Time)
	foreign := 0
	for _, d := range c.sink.Deliveries() {
		k := offsetKey{d.Partition, d.Offset}
		r := o.data[k]
		if d.Topic != c.topic || r == nil || d.Key != string(r.Key) || !bytes.Equal(d.Body, r.Value) {
			if foreign < 5 {
				t.Errorf("delivery of %s/%d@%d (key %q, body %q) is not a committed record of the log", d.Topic, d.Partition, d.Offset, d.Key, d.Body)
			}
			foreign++
			continue
		}
		if d.Status >= 200 && d.Status < 300 {
			if at, ok := firstAck[k]; !ok || d.End.Before(at) {
				firstAck[k] = d.End
			}
		}
	}
	if foreign > 0 {
		t.Errorf("%d deliveries were not committed records of the log", foreign)
	}

	// Guarantee 1: nothing lost.
	var lost []offsetKey
	for k := range o.data {
		if _, ok := firstAck[k]; ok {
			continue
		}
		if _, ok := o.deadLetters[k]; ok {
			continue
		}
		lost = append(lost, k)
	}
	o.lost = len(lost)
	if o.lost > 0 {
		sort.Slice(lost, func(i, j int) bool {
			return lost[i].partition < lost[j].partition || lost[i].partition == lost[j].partition && lost[i].offset < lost[j].offset
		})
		t.Errorf("%d records lost (neither acked by the endpoint nor dead-lettered), first: %v", o.lost, lost[:min(len(lost), 10)])
	}

	// Guarantee 2: per-key order over first deliveries.
	if v := c.sink.KeyOrderViolations(); len(v) > 0 {
		t.Errorf("%d per-key order violations, first: %v", len(v), v[:min(len(v), 5)])
	}

	// Guarantee 3: the commit never moved back, never passed an offset that
	// was neither acked, dead-lettered nor a gap, and reached the log end.
	c.sampler.mu.Lock()
	decreases := append([]string(nil), c.sampler.decreases...)
	samples := c.sampler.samples
	c.sampler.mu.Unlock()
	if len(decreases) > 0 {
		t.Errorf("%d commits moved backwards: %v", len(decreases), decreases[:min(len(decreases), 5)])
	}
	var passed []string
	for p := range int32(faultPartitions) {
		over, desc := overshoot(p, ends[p], samples[p], o, firstAck)
		o.overshoot = max(o.overshoot, over)
		passed = append(passed, desc...)
	}
	if len(passed) > 0 {
		t.Errorf("max commit overshoot %d: %d commits passed unacked offsets, first: %v", o.overshoot, len(passed), passed[:min(len(passed), 5)])
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	commits, err := c.committed(ctx)
	cancel()
	if err != nil {
		t.Errorf("final commits: %v", err)
	}
	for p := range int32(faultPartitions) {
		if ends[p] > 0 && commits[p] != ends[p] {
			t.Errorf("partition %d: final commit %d, log end %d", p, commits[p], ends[p])
		}
	}

	// Guarantee 4: duplicates within what the scenario's failures allow.
	o.duplicates = c.sink.Duplicates()
	c.mu.Lock()
	o.bound = c.bound
	c.mu.Unlock()
	if o.duplicates > o.bound {
		t.Errorf("%d duplicates, want at most %d", o.duplicates, o.bound)
	}
	return o
}

// overshoot checks one partition's observed commits: a commit c seen at
// time at is sound when every offset below c was, by then, a gap, acked by
// the endpoint or dead-lettered. It returns the largest distance by which a
// commit passed the first offset that was not, and a description of each
// such commit.
func overshoot(p int32, end int64, samples []commitSample, o outcome, firstAck map[offsetKey]time.Time) (int64, []string) {
	const (
		gap   = math.MinInt64 // not a data record: never holds a commit back
		never = math.MaxInt64 // never acked
	)
	// doneAt[i] is when offset i stopped holding the commit back, in unix
	// nanoseconds; behind[i] is the latest of doneAt over offsets below i.
	doneAt := make([]int64, end)
	behind := make([]int64, end+1)
	behind[0] = gap
	for i := range end {
		k := offsetKey{p, i}
		switch {
		case o.data[k] == nil:
			doneAt[i] = gap
		case !firstAck[k].IsZero():
			doneAt[i] = firstAck[k].UnixNano()
		case o.deadLetters[k] != nil:
			doneAt[i] = deadLetteredAt(o.deadLetters[k]).UnixNano()
		default:
			doneAt[i] = never
		}
		behind[i+1] = max(behind[i], doneAt[i])
	}
	var worst int64
	var desc []string
	for _, s := range samples {
		at := s.at.UnixNano()
		c := s.offset
		if c > end {
			desc = append(desc, fmt.Sprintf("partition %d: commit %d beyond the log end %d", p, c, end))
			worst = max(worst, c-end)
			c = end
		}
		if behind[c] <= at {
			continue
		}
		first := int64(0)
		for doneAt[first] <= at {
			first++
		}
		worst = max(worst, s.offset-first)
		desc = append(desc, fmt.Sprintf("partition %d: commit %d seen at %s while offset %d was not acked",
			p, s.offset, s.at.Format("15:04:05.000"), first))
	}
	return worst, desc
}

// readTopic reads every partition of topic from its start up to ends, as
// keyhook does: committed data only (read_committed), control records kept.
func (c *cluster) readTopic(topic string, ends map[int32]int64) []*kgo.Record {
	t := c.t
	t.Helper()
	parts := make(map[int32]kgo.Offset)
	for p, end := range ends {
		if end > 0 {
			parts[p] = kgo.NewOffset().AtStart()
		}
	}
	if len(parts) == 0 {
		return nil
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	next := make(map[int32]int64)
	var out []*kgo.Record
	for {
		done := true
		for p, end := range ends {
			if next[p] < end {
				done = false
			}
		}
		if done {
			return out
		}
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s: stopped at %v, want %v: %v", topic, next, ends, ctx.Err())
		}
		fetches.EachError(func(_ string, p int32, err error) {
			t.Logf("read %s[%d]: %v", topic, p, err)
		})
		fetches.EachRecord(func(r *kgo.Record) {
			if r.Offset < ends[r.Partition] {
				out = append(out, r)
			}
			next[r.Partition] = max(next[r.Partition], r.Offset+1)
		})
	}
}

func seqOf(value []byte) (int64, error) {
	var seq int64
	if _, err := fmt.Sscanf(string(value), `{"seq":%d}`, &seq); err != nil {
		return 0, fmt.Errorf("value %q carries no sequence number: %w", value, err)
	}
	return seq, nil
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// deadLetteredAt is a moment no later than the one a dead-lettered record
// counted as acked: the end of its last attempt, which keyhook stamps on
// the dead letter before writing it (the record's own timestamp is the
// original one). Without that header, the dead letter's timestamp.
func deadLetteredAt(r *kgo.Record) time.Time {
	if at, err := time.Parse(time.RFC3339Nano, header(r, deadletter.HeaderLastAttempt)); err == nil {
		return at
	}
	return r.Timestamp
}

func hasHeader(r *kgo.Record, key string) bool {
	for _, h := range r.Headers {
		if h.Key == key {
			return true
		}
	}
	return false
}

func head(s []int64) []int64 {
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[:min(len(s), 10)]
}
