package verify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/deadletter"
	"github.com/keyhook/keyhook/internal/testutil"
)

// OffsetKey names one offset of the verified topic.
type OffsetKey struct {
	Partition int32
	Offset    int64
}

// Subject is what a test verifies: one subscription's topic, group and
// endpoint.
type Subject struct {
	// Brokers and Adm reach the Kafka the test ran on.
	Brokers []string
	Adm     *kadm.Client
	// Topic is the subscription's topic, of Partitions partitions.
	Topic      string
	Partitions int32
	// DeadLetterTopic is the subscription's dead-letter topic; empty when
	// it has none (then nothing may be dead-lettered).
	DeadLetterTopic string
	// Group is the subscription's consumer group.
	Group string
	// Sink is the endpoint every delivery went to.
	Sink *testutil.Sink
	// Sampler watched the group's commits while the test ran.
	Sampler *CommitSampler
	// KeyOrder checks per-key order (orderings key and partition).
	KeyOrder bool
	// Expected are the sequence numbers producers were told are committed:
	// the log must hold exactly these. Nil skips the check.
	Expected map[int64]bool
	// Bound is how many duplicates the test's failures allow.
	Bound int
	// Failed names the senders (Delivery.Origin) that were killed or
	// stopped: a request of theirs overlapping another of its key is a
	// redelivery after a failure, not a broken lane.
	Failed map[string]bool
}

// Outcome is what the verifier found; tests check more on it.
type Outcome struct {
	Records    int
	Lost       int
	Duplicates int
	Bound      int
	Overshoot  int64
	// Overlaps counts the requests sent while another of their key was in
	// flight at the sink, neither from a failed sender; FailureOverlaps
	// those where one was (see Subject.Failed).
	Overlaps        int
	FailureOverlaps int
	// Data are the committed data records of the topic (aborted records
	// and control records are not in it).
	Data map[OffsetKey]*kgo.Record
	// DeadLetters are the records of the dead-letter topic, by the offset
	// they came from.
	DeadLetters map[OffsetKey]*kgo.Record
}

// LogEnds returns each partition's high watermark, which counts control
// records (transaction markers) too.
func LogEnds(ctx context.Context, adm *kadm.Client, topic string) (map[int32]int64, error) {
	listed, err := adm.ListEndOffsets(ctx, topic)
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

// Committed returns the group's committed offsets of the subject's topic.
func (s Subject) Committed(ctx context.Context) (map[int32]int64, error) {
	offs, err := s.Adm.FetchOffsets(ctx, s.Group)
	if err != nil {
		return nil, err
	}
	if err := offs.Error(); err != nil {
		return nil, err
	}
	out := make(map[int32]int64)
	for p := range s.Partitions {
		if o, ok := offs.Lookup(s.Topic, p); ok && o.Err == nil && o.At >= 0 {
			out[p] = o.At
		}
	}
	return out, nil
}

// ErrNotSettled is returned by WaitSettled when the commits did not reach
// the log ends in time.
var ErrNotSettled = errors.New("verify: commits did not reach the log end")

// WaitSettled waits until every partition's commit equals its log end and
// returns the ends. On timeout it returns the ends and commits it last saw
// with an error wrapping ErrNotSettled (and the last fetch error), so the
// caller can say where each partition stands and still verify.
func (s Subject) WaitSettled(timeout time.Duration) (ends, commits map[int32]int64, err error) {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ends, err = LogEnds(ctx, s.Adm, s.Topic)
		if err == nil {
			commits, err = s.Committed(ctx)
		}
		cancel()
		if err == nil && s.settled(ends, commits) {
			return ends, commits, nil
		}
		if time.Now().After(deadline) {
			return ends, commits, fmt.Errorf("%w within %v (last error %v)", ErrNotSettled, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s Subject) settled(ends, commits map[int32]int64) bool {
	if len(ends) != int(s.Partitions) {
		return false
	}
	for p, end := range ends {
		if c, ok := commits[p]; end > 0 && (!ok || c != end) {
			return false
		}
	}
	return true
}

// Check verifies the guarantees on everything the test left behind, up to
// the log ends given, reporting each violation through t.
func (s Subject) Check(t testing.TB, ends map[int32]int64) Outcome {
	t.Helper()
	o := Outcome{Data: make(map[OffsetKey]*kgo.Record), DeadLetters: make(map[OffsetKey]*kgo.Record), Bound: s.Bound}

	// The truth: the committed data of the log, read as keyhook reads it.
	seqs := make(map[int64]bool)
	for _, r := range ReadTopic(t, s.Brokers, s.Topic, ends) {
		if r.Attrs.IsControl() {
			continue
		}
		o.Data[OffsetKey{r.Partition, r.Offset}] = r
		seq, err := SeqOf(r.Value)
		if err != nil {
			t.Errorf("partition %d offset %d: %v", r.Partition, r.Offset, err)
			continue
		}
		seqs[seq] = true
	}
	o.Records = len(o.Data)
	if s.Expected != nil {
		var missingFromLog, unexpected []int64
		for q := range s.Expected {
			if !seqs[q] {
				missingFromLog = append(missingFromLog, q)
			}
		}
		for q := range seqs {
			if !s.Expected[q] {
				unexpected = append(unexpected, q)
			}
		}
		if len(missingFromLog) > 0 {
			t.Errorf("%d acknowledged records are not in the log (the broker lost them, not keyhook): %v", len(missingFromLog), head(missingFromLog))
		}
		if len(unexpected) > 0 {
			t.Errorf("%d records in the log were never acknowledged as committed to the producer (aborted data visible?): %v", len(unexpected), head(unexpected))
		}
	}

	// Dead letters, by the offset they came from.
	if s.DeadLetterTopic != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		dlqEnds, err := LogEnds(ctx, s.Adm, s.DeadLetterTopic)
		cancel()
		if err != nil {
			t.Fatalf("dead-letter topic end: %v", err)
		}
		for _, r := range ReadTopic(t, s.Brokers, s.DeadLetterTopic, dlqEnds) {
			p, err1 := strconv.ParseInt(Header(r, deadletter.HeaderPartition), 10, 32)
			off, err2 := strconv.ParseInt(Header(r, deadletter.HeaderOffset), 10, 64)
			if err1 != nil || err2 != nil || Header(r, deadletter.HeaderTopic) != s.Topic {
				t.Errorf("dead letter at offset %d names no source offset of %s: headers %v", r.Offset, s.Topic, r.Headers)
				continue
			}
			k := OffsetKey{int32(p), off}
			if _, dup := o.DeadLetters[k]; !dup {
				o.DeadLetters[k] = r
			}
		}
	}

	// When each record was first acked at the sink; and every delivery
	// must be a committed data record, as it is in the log.
	firstAck := make(map[OffsetKey]time.Time)
	foreign := 0
	for _, d := range s.Sink.Deliveries() {
		k := OffsetKey{d.Partition, d.Offset}
		r := o.Data[k]
		if d.Topic != s.Topic || r == nil || d.Key != string(r.Key) || !bytes.Equal(d.Body, r.Value) {
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
	var lost []OffsetKey
	for k := range o.Data {
		if _, ok := firstAck[k]; ok {
			continue
		}
		if _, ok := o.DeadLetters[k]; ok {
			continue
		}
		lost = append(lost, k)
	}
	o.Lost = len(lost)
	if o.Lost > 0 {
		sort.Slice(lost, func(i, j int) bool {
			return lost[i].Partition < lost[j].Partition || lost[i].Partition == lost[j].Partition && lost[i].Offset < lost[j].Offset
		})
		t.Errorf("%d records lost (neither acked by the endpoint nor dead-lettered), first: %v", o.Lost, lost[:min(len(lost), 10)])
	}

	// Guarantee 2: per-key order over first deliveries.
	if s.KeyOrder {
		if v := s.Sink.KeyOrderViolations(); len(v) > 0 {
			t.Errorf("%d per-key order violations, first: %v", len(v), v[:min(len(v), 5)])
		}
	}

	// Guarantee 3: the commit never moved back, never passed an offset that
	// was neither acked, dead-lettered nor a gap, and reached the log end.
	var samples map[int32][]CommitSample
	if s.Sampler != nil {
		var decreases []string
		samples, decreases = s.Sampler.observed()
		if len(decreases) > 0 {
			t.Errorf("%d commits moved backwards: %v", len(decreases), decreases[:min(len(decreases), 5)])
		}
	}
	var passed []string
	for p := range s.Partitions {
		over, desc := Overshoot(p, ends[p], samples[p], o, firstAck)
		o.Overshoot = max(o.Overshoot, over)
		passed = append(passed, desc...)
	}
	if len(passed) > 0 {
		t.Errorf("max commit overshoot %d: %d commits passed unacked offsets, first: %v", o.Overshoot, len(passed), passed[:min(len(passed), 5)])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	commits, err := s.Committed(ctx)
	cancel()
	if err != nil {
		t.Errorf("final commits: %v", err)
	}
	for p := range s.Partitions {
		if ends[p] > 0 && commits[p] != ends[p] {
			t.Errorf("partition %d: final commit %d, log end %d", p, commits[p], ends[p])
		}
	}

	// Guarantee 4: duplicates within what the test's failures allow.
	o.Duplicates = s.Sink.Duplicates()
	if o.Duplicates > o.Bound {
		t.Errorf("%d duplicates, want at most %d", o.Duplicates, o.Bound)
	}

	// Guarantees 2 and 4 across nodes: two requests of one key never in
	// flight together, whichever nodes sent them, except after a failure,
	// and then within its bound.
	if s.KeyOrder {
		plain, failure := ClassifyOverlaps(s.Sink.KeyOverlaps(), s.Failed)
		o.Overlaps, o.FailureOverlaps = len(plain), len(failure)
		switch {
		case o.Bound == 0 && len(plain) > 0:
			t.Errorf("%d requests sent while another of their key was in flight, without any failure; first: %v", len(plain), overlapHead(plain))
		case len(plain)+len(failure) > o.Bound:
			t.Errorf("%d requests sent while another of their key was in flight (%d involving a failed node), want at most %d; first: %v",
				len(plain)+len(failure), len(failure), o.Bound, overlapHead(append(plain, failure...)))
		}
	}
	return o
}

// ClassifyOverlaps splits overlaps into those between live senders and
// those where a sender in failed (killed or stopped) sent either request.
func ClassifyOverlaps(overlaps []testutil.Overlap, failed map[string]bool) (plain, failure []testutil.Overlap) {
	for _, ov := range overlaps {
		if failed[ov.Earlier.Origin] || failed[ov.Later.Origin] {
			failure = append(failure, ov)
		} else {
			plain = append(plain, ov)
		}
	}
	return plain, failure
}

func overlapHead(ovs []testutil.Overlap) []string {
	var out []string
	for _, ov := range ovs[:min(len(ovs), 5)] {
		out = append(out, ov.String())
	}
	return out
}

// ReadTopic reads every partition of topic from its start up to ends, as
// keyhook does: committed data only (read_committed), control records kept.
func ReadTopic(t testing.TB, brokers []string, topic string, ends map[int32]int64) []*kgo.Record {
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
		kgo.SeedBrokers(brokers...),
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

// Record is record seq of a test: key "key-<seq mod keys>", value
// {"seq":<seq>}, which SeqOf reads back.
func Record(seq int64, keys int) *kgo.Record {
	return &kgo.Record{
		Key:   fmt.Appendf(nil, "key-%d", seq%int64(keys)),
		Value: fmt.Appendf(nil, `{"seq":%d}`, seq),
	}
}

// Overshoot checks one partition's observed commits: a commit c seen at
// time at is sound when every offset below c was, by then, a gap, acked by
// the endpoint or dead-lettered. It returns the largest distance by which a
// commit passed the first offset that was not, and a description of each
// such commit.
func Overshoot(p int32, end int64, samples []CommitSample, o Outcome, firstAck map[OffsetKey]time.Time) (int64, []string) {
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
		k := OffsetKey{p, i}
		switch {
		case o.Data[k] == nil:
			doneAt[i] = gap
		case !firstAck[k].IsZero():
			doneAt[i] = firstAck[k].UnixNano()
		case o.DeadLetters[k] != nil:
			doneAt[i] = DeadLetteredAt(o.DeadLetters[k]).UnixNano()
		default:
			doneAt[i] = never
		}
		behind[i+1] = max(behind[i], doneAt[i])
	}
	var worst int64
	var desc []string
	for _, s := range samples {
		at := s.At.UnixNano()
		c := s.Offset
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
		worst = max(worst, s.Offset-first)
		desc = append(desc, fmt.Sprintf("partition %d: commit %d seen at %s while offset %d was not acked",
			p, s.Offset, s.At.Format("15:04:05.000"), first))
	}
	return worst, desc
}

// SeqOf reads the sequence number of a Record value.
func SeqOf(value []byte) (int64, error) {
	var seq int64
	if _, err := fmt.Sscanf(string(value), `{"seq":%d}`, &seq); err != nil {
		return 0, fmt.Errorf("value %q carries no sequence number: %w", value, err)
	}
	return seq, nil
}

// Header returns the value of r's header key, or "".
func Header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// DeadLetteredAt is a moment no later than the one a dead-lettered record
// counted as acked: the end of its last attempt, which keyhook stamps on
// the dead letter before writing it (the record's own timestamp is the
// original one). Without that header, the dead letter's timestamp.
func DeadLetteredAt(r *kgo.Record) time.Time {
	if at, err := time.Parse(time.RFC3339Nano, Header(r, deadletter.HeaderLastAttempt)); err == nil {
		return at
	}
	return r.Timestamp
}

// HasHeader reports whether r has a header key.
func HasHeader(r *kgo.Record, key string) bool {
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
