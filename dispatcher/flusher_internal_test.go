package dispatcher

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/keyhook/keyhook/tracking"
)

// slowTracker takes per for each partition of a call, and fails the call
// when its deadline comes first, as a pipelined round of Redis scripts
// does. It counts the calls, the most at once, and each partition's
// writes.
type slowTracker struct {
	noTracker
	per time.Duration

	mu                 sync.Mutex
	calls, now, atOnce int
	written            map[int32]int
}

func (s *slowTracker) FlushRanges(ctx context.Context, fs []tracking.PartitionFlush) []tracking.FlushResult {
	s.mu.Lock()
	s.calls++
	s.now++
	s.atOnce = max(s.atOnce, s.now)
	s.mu.Unlock()
	var err error
	select {
	case <-time.After(time.Duration(len(fs)) * s.per):
	case <-ctx.Done():
		err = ctx.Err()
	}
	out := make([]tracking.FlushResult, len(fs))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now--
	for i, pf := range fs {
		out[i] = tracking.FlushResult{Err: err, Watermark: -1, Committed: -1}
		if err == nil {
			s.written[pf.Key.Partition]++
		}
	}
	return out
}

// A round of more partitions than one deadline can write is written in
// chunks, several at once, each under its own deadline: every partition
// is written once and none fails. Under one deadline for the round, a
// node with both cores full failed all 3,600 partitions of its rounds,
// one after the other, at 1,000 subscriptions; here the round as one
// call would take 2.5 s against flushTimeout's 2 s.
func TestARoundTooLargeForOneDeadlineIsWrittenInChunksEachUnderItsOwn(t *testing.T) {
	const n = 2048
	per := 1200 * time.Microsecond
	if time.Duration(n)*per <= flushTimeout || flushChunk*per*2 > flushTimeout {
		t.Fatalf("the test needs a round longer than flushTimeout (%v) and chunks well within it", flushTimeout)
	}
	var logs logRecords
	tr := &slowTracker{per: per, written: map[int32]int{}}
	fl := newFlusher(tr, time.Hour, slog.New(&logs))
	ws := roundWorkers(t, n)
	for _, w := range ws {
		fl.submit(flushReq{w: w})
	}
	fl.round(context.Background())

	wantLogs(t, "the round", logs.take())
	for _, w := range ws {
		_, fs, _ := w.mail.takeTracking()
		if len(fs) != 1 || fs[0].err != nil {
			t.Fatalf("partition %d got %d flush answers (%v), want one success", w.pk.Partition, len(fs), fs)
		}
		if got := tr.written[w.pk.Partition]; got != 1 {
			t.Fatalf("partition %d written %d times, want once", w.pk.Partition, got)
		}
	}
	if want := n / flushChunk; tr.calls != want {
		t.Errorf("%d calls for %d partitions, want %d of %d", tr.calls, n, want, flushChunk)
	}
	if tr.atOnce < 2 || tr.atOnce > flushParallel {
		t.Errorf("%d calls at once, want 2 to %d", tr.atOnce, flushParallel)
	}
}

// A round of one chunk is one call on the flusher's goroutine.
func TestASmallRoundIsOneCall(t *testing.T) {
	tr := &slowTracker{written: map[int32]int{}}
	fl := newFlusher(tr, time.Hour, slog.New(&logRecords{}))
	ws := roundWorkers(t, flushChunk)
	for _, w := range ws {
		fl.submit(flushReq{w: w})
	}
	fl.round(context.Background())
	if tr.calls != 1 || len(tr.written) != flushChunk {
		t.Errorf("%d calls wrote %d partitions, want 1 of %d", tr.calls, len(tr.written), flushChunk)
	}
}

// Once two rounds ran, a round's pending snapshots go into the slice of
// the round before it, which no longer holds the workers it wrote.
func TestSubmittingAfterARoundReusesItsSlice(t *testing.T) {
	fl := newFlusher(noTracker{}, time.Hour, slog.New(&logRecords{}))
	ws := roundWorkers(t, 512)
	submitAll := func() {
		for _, w := range ws {
			fl.submit(flushReq{w: w})
		}
	}
	for range 2 {
		submitAll()
		fl.round(context.Background())
	}
	if cap(fl.pending) < len(ws) || cap(fl.spare) < len(ws) {
		t.Fatalf("after two rounds of %d the slices hold %d and %d, want room for them all", len(ws), cap(fl.pending), cap(fl.spare))
	}
	for i, r := range fl.pending[:len(ws)] {
		if r.w != nil {
			t.Fatalf("the emptied slice still holds worker %d", i)
		}
	}
	last := &fl.pending[:len(ws)][len(ws)-1]
	submitAll()
	if &fl.pending[len(ws)-1] != last {
		t.Errorf("the next round's %d snapshots went into a new slice, not an earlier round's", len(ws))
	}
}
