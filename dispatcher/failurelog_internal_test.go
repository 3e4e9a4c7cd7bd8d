package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/keyhook/keyhook/tracking"
)

// logRecords keeps the messages logged through it, with their level.
type logRecords struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecords) WithGroup(string) slog.Handler            { return l }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Level.String()+" "+r.Message)
	return nil
}

func (l *logRecords) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.msgs
	l.msgs = nil
	return out
}

// failingRounds answers every flush and claim of a round with err while
// it is set; partition 0 is always refused (a newer owner's), which is
// its worker's news, not a failure of the round.
type failingRounds struct {
	noTracker
	err error
}

func (f *failingRounds) answer(p int32) error {
	if p == 0 {
		return fmt.Errorf("partition 0: %w", tracking.ErrFenced)
	}
	return f.err
}

func (f *failingRounds) FlushRanges(_ context.Context, fs []tracking.PartitionFlush) []tracking.FlushResult {
	out := make([]tracking.FlushResult, len(fs))
	for i, pf := range fs {
		out[i] = tracking.FlushResult{Err: f.answer(pf.Key.Partition), Watermark: -1, Committed: -1}
	}
	return out
}

func (f *failingRounds) ClaimMany(_ context.Context, cs []tracking.PartitionClaim) []tracking.ClaimResult {
	out := make([]tracking.ClaimResult, len(cs))
	for i, c := range cs {
		out[i].Err = f.answer(c.Key.Partition)
	}
	return out
}

// roundWorkers are n workers of partitions 0..n-1.
func roundWorkers(t *testing.T, n int) []*worker {
	ws := make([]*worker, n)
	for i := range ws {
		ws[i] = leasedWorker(t, 4*time.Second)
		ws[i].ctx = context.Background()
		ws[i].pk = tracking.PartitionKey{Subscription: "s", Topic: "t", Partition: int32(i)}
	}
	return ws
}

// wantLogs fails unless got is exactly want.
func wantLogs(t *testing.T, when string, got []string, want ...string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s: logged %q, want %q", when, got, want)
	}
}

// A round of flushes that cannot reach Redis fails for every partition of
// the node, and is said once: a warning when rounds start failing, one
// line when they succeed again, nothing per partition and nothing more
// while they go on failing. At 1,000 subscriptions a node logged 4,000
// lines a failed round, and its deliveries waited on the log's lock. The
// round here is made in three chunks (chunks.go): the round says it, not
// each chunk.
func TestAFailingFlushRoundIsLoggedOnceNotPerPartition(t *testing.T) {
	const n = 2*roundChunk + 50
	var logs logRecords
	tr := &failingRounds{err: errors.New("read tcp 127.0.0.1:6379: i/o timeout")}
	fl := newFlusher(tr, time.Hour, slog.New(&logs))
	ws := roundWorkers(t, n)
	round := func() {
		for _, w := range ws {
			fl.submit(flushReq{w: w})
		}
		fl.round(context.Background())
	}
	warn := "WARN flush failed; will retry: commits wait for the writes, and a partition whose lease runs out stops delivering"
	round()
	wantLogs(t, "the first failed round", logs.take(), warn)
	for _, w := range ws[1:] {
		_, fs, _ := w.mail.takeTracking()
		if len(fs) != 1 || fs[0].err == nil {
			t.Fatalf("partition %d got %d flush answers (%v), want its failure", w.pk.Partition, len(fs), fs)
		}
		// Its worker says nothing of it: the next flush retries.
		w.log = slog.New(&logs)
		w.flushed(fs[0])
	}
	wantLogs(t, "the workers taking the failed round's answers", logs.take())
	round()
	wantLogs(t, "a second failed round", logs.take())
	tr.err = nil
	round()
	wantLogs(t, "the round that succeeded again (partition 0 refused)", logs.take(), "INFO flushes written again")
	round()
	wantLogs(t, "a round that succeeded", logs.take())
}

// A round of claims that cannot reach Redis is said once, as a failed
// round of flushes is; a refused claim is its partition's, which its
// worker says.
func TestAFailingClaimRoundIsLoggedOnceNotPerPartition(t *testing.T) {
	const n = 50
	var logs logRecords
	tr := &failingRounds{err: errors.New("read tcp 127.0.0.1:6379: i/o timeout")}
	c := newClaimer(tr, slog.New(&logs))
	ws := roundWorkers(t, n)
	round := func() {
		for _, w := range ws {
			w.bg.Add(1)
			c.submit(claimReq{w: w, c: tracking.PartitionClaim{Key: w.pk, Owner: "n1", Generation: 1}})
		}
		c.round(context.Background())
		for _, w := range ws {
			w.bg.Wait()
			if cs, _, _ := w.mail.takeTracking(); len(cs) != 1 {
				t.Fatalf("partition %d got %d claim answers, want 1", w.pk.Partition, len(cs))
			}
		}
	}
	round()
	wantLogs(t, "the first failed round", logs.take(), "WARN claim failed; retrying: the partitions wait unclaimed, delivering nothing")
	round()
	wantLogs(t, "a second failed round", logs.take())
	tr.err = nil
	round()
	wantLogs(t, "the round that succeeded again (partition 0 refused)", logs.take(), "INFO claims made again")
}
