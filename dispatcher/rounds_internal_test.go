package dispatcher

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/keyhook/keyhook/keyrange"
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

// call takes per for each of n partitions, or fails when ctx ends
// first, and counts the call; done counts what it wrote.
func (s *slowTracker) call(ctx context.Context, n int) (done func(p int32), err error) {
	s.mu.Lock()
	s.calls++
	s.now++
	s.atOnce = max(s.atOnce, s.now)
	s.mu.Unlock()
	select {
	case <-time.After(time.Duration(n) * s.per):
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.mu.Lock()
	s.now--
	s.mu.Unlock()
	return func(p int32) {
		if err == nil {
			s.mu.Lock()
			s.written[p]++
			s.mu.Unlock()
		}
	}, err
}

func (s *slowTracker) FlushRanges(ctx context.Context, fs []tracking.PartitionFlush) []tracking.FlushResult {
	done, err := s.call(ctx, len(fs))
	out := make([]tracking.FlushResult, len(fs))
	for i, pf := range fs {
		out[i] = tracking.FlushResult{Err: err, Watermark: -1, Committed: -1}
		done(pf.Key.Partition)
	}
	return out
}

func (s *slowTracker) RenewRanges(ctx context.Context, rs []tracking.PartitionRenewal) []error {
	done, err := s.call(ctx, len(rs))
	out := make([]error, len(rs))
	for i, r := range rs {
		out[i] = err
		done(r.Key.Partition)
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
	if time.Duration(n)*per <= flushTimeout || roundChunk*per*2 > flushTimeout {
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
	if want := n / roundChunk; tr.calls != want {
		t.Errorf("%d calls for %d partitions, want %d of %d", tr.calls, n, want, roundChunk)
	}
	if tr.atOnce < 2 || tr.atOnce > roundParallel {
		t.Errorf("%d calls at once, want 2 to %d", tr.atOnce, roundParallel)
	}
}

// A round of one chunk is one call on the flusher's goroutine.
func TestASmallRoundIsOneCall(t *testing.T) {
	tr := &slowTracker{written: map[int32]int{}}
	fl := newFlusher(tr, time.Hour, slog.New(&logRecords{}))
	ws := roundWorkers(t, roundChunk)
	for _, w := range ws {
		fl.submit(flushReq{w: w})
	}
	fl.round(context.Background())
	if tr.calls != 1 || len(tr.written) != roundChunk {
		t.Errorf("%d calls wrote %d partitions, want 1 of %d", tr.calls, len(tr.written), roundChunk)
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

// A renewal round too large for one deadline is made in chunks, each
// under its own: every lease running down is renewed once, none fails.
func TestARenewalRoundTooLargeForOneDeadlineIsMadeInChunks(t *testing.T) {
	const n, length = 2048, 4 * time.Second // roundWorkers' leases
	per := 1200 * time.Microsecond
	tr := &slowTracker{per: per, written: map[int32]int{}}
	var logs logRecords
	r := newRenewer(tr, length, slog.New(&logs))
	ws := roundWorkers(t, n)
	for _, w := range ws {
		w.lease.end.Store(int64(w.lease.since() + length/4))
		w.pub.claimed.Store(true)
		w.pub.epoch.Store(1)
		full := keyrange.Full()
		w.pub.ranges.Store(&full)
		r.add(w)
	}
	now := time.Now()
	r.round(context.Background(), now)

	wantLogs(t, "the round", logs.take())
	for _, w := range ws {
		if got := tr.written[w.pk.Partition]; got != 1 {
			t.Fatalf("partition %d renewed %d times, want once", w.pk.Partition, got)
		}
		if got, want := w.lease.end.Load(), int64(now.Sub(w.lease.born)+length); got != want {
			t.Fatalf("partition %d: lease ends at %v, want %v, a lease from the round", w.pk.Partition, time.Duration(got), time.Duration(want))
		}
	}
	if want := n / roundChunk; tr.calls != want || tr.atOnce < 2 || tr.atOnce > roundParallel {
		t.Errorf("%d calls, %d at once, for %d partitions; want %d of %d, 2 to %d at once", tr.calls, tr.atOnce, n, want, roundChunk, roundParallel)
	}
}
