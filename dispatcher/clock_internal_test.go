package dispatcher

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/keyrange"
	"github.com/keyhook/keyhook/partition"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// leasedWorker is a claimed worker whose tracker and coordinator both
// confirmed just now, each for a whole lease of length.
func leasedWorker(t *testing.T, length time.Duration) *worker {
	t.Helper()
	m, err := partition.New[*kgo.Record](partition.Config{MaxWindow: 10})
	if err != nil {
		t.Fatal(err)
	}
	m.Claim(nil)
	n := &Node{cfg: Config{Tuning: Tuning{FlushInterval: 100 * time.Millisecond}}}
	n.cfg = n.cfg.withDefaults()
	tel, err := newTelemetry(n)
	if err != nil {
		t.Fatal(err)
	}
	n.tel = tel
	g := &group{n: n, tel: tel, sub: &subscription.Subscription{ID: "s"}, live: newLiveness(length, nil)}
	w := &worker{g: g, m: m, lease: newLease(length), mail: newMailbox(nil)}
	w.lease.renew(w.since(), discard)
	g.live.until.Store(int64(time.Since(g.live.born) + length))
	return w
}

// A partition with records pending wakes when its ownership lease runs
// low, half a lease before it ends, so the flush of that turn renews it
// before it lapses, whatever the node's renewer does. The membership's
// confirmation, the other thing it waits for, ends as late as the lease
// itself: waking only for it, the partition would stop delivering until
// a write confirms the claim again.
func TestABusyPartitionWakesToRenewItsLeaseBeforeItRunsOut(t *testing.T) {
	const length = 4 * time.Second
	w := leasedWorker(t, length)
	w.m.Offer([]partition.Record[*kgo.Record]{{Offset: 0, Key: []byte("k"), Payload: &kgo.Record{}}})
	now := time.Now()
	next := w.nextDue(now)
	if next.IsZero() {
		t.Fatal("a partition with a record pending is never due; its lease would run out")
	}
	if low := w.lease.lowAt(); next.After(low) {
		t.Errorf("the loop is next due in %v, after its lease runs low in %v; want it to wake to renew the lease by then",
			next.Sub(now).Round(time.Millisecond), low.Sub(now).Round(time.Millisecond))
	}
	if !next.After(now) {
		t.Errorf("the loop is due at once (%v), want it to sleep until something is due", next.Sub(now))
	}
}

// An idle partition is never due for its lease: the node's renewer
// renews it, so its loop, without a goroutine, stays asleep.
func TestAnIdlePartitionIsNeverDueForItsLease(t *testing.T) {
	w := leasedWorker(t, 4*time.Second)
	if next := w.nextDue(time.Now()); !next.IsZero() {
		t.Errorf("an idle partition is due in %v; want it never due", time.Until(next).Round(time.Millisecond))
	}
}

// renewTracker answers renewals with errs by partition and records them.
type renewTracker struct {
	noTracker
	errs map[int32]error
	got  []tracking.PartitionRenewal
}

func (r *renewTracker) RenewRanges(_ context.Context, rs []tracking.PartitionRenewal) []error {
	r.got = append(r.got, rs...)
	out := make([]error, len(rs))
	for i, x := range rs {
		out[i] = r.errs[x.Key.Partition]
	}
	return out
}

// The renewer renews the leases with less than three quarters left, from
// the time of the round, with each claim's epoch and ranges; it leaves
// the others, the fenced and the unclaimed alone. A renewal refused wakes
// the loop to flush, and one that ends a lapse wakes it to deliver.
func TestTheRenewerRenewsLeasesRunningDownAndWakesTheLoopsThatMustAct(t *testing.T) {
	const length = 8 * time.Second
	tr := &renewTracker{errs: map[int32]error{3: tracking.ErrFenced, 4: errors.New("redis: connection refused")}}
	r := newRenewer(tr, length, discard)
	mk := func(p int32, left time.Duration) *worker {
		w := leasedWorker(t, length)
		w.pk = tracking.PartitionKey{Subscription: "s", Topic: "t", Partition: p}
		w.lease.end.Store(int64(w.lease.since() + left))
		w.pub.claimed.Store(true)
		w.pub.epoch.Store(int64(10 + p))
		ranges := keyrange.Set{{Lo: 0, Hi: 100 * uint32(p+1)}}
		w.pub.ranges.Store(&ranges)
		r.add(w)
		return w
	}
	fresh := mk(0, length)        // three quarters or more left: left alone
	low := mk(1, length/2)        // renewed
	lapsed := mk(2, -time.Second) // renewed, and woken
	refused := mk(3, length/2)    // refused: woken to flush
	failing := mk(4, length/2)    // Redis failed: unchanged
	fenced := mk(5, length/2)     // fenced: left alone
	fenced.pub.fenced.Store(true)
	unclaimed := mk(6, length/2) // no claim yet: left alone
	unclaimed.pub.ranges.Store(nil)
	gone := mk(7, length/2) // ended: left alone
	r.remove(gone)
	lowEnd, failingEnd := low.lease.end.Load(), failing.lease.end.Load()

	now := time.Now()
	r.round(context.Background(), now)

	renewed := map[int32]tracking.PartitionRenewal{}
	for _, x := range tr.got {
		renewed[x.Key.Partition] = x
	}
	for _, p := range []int32{0, 5, 6, 7} {
		if _, ok := renewed[p]; ok {
			t.Errorf("partition %d was renewed; want it left alone", p)
		}
	}
	for _, p := range []int32{1, 2, 3, 4} {
		x, ok := renewed[p]
		if !ok {
			t.Errorf("partition %d was not renewed", p)
			continue
		}
		if want := (keyrange.Set{{Lo: 0, Hi: 100 * uint32(p+1)}}); x.Epoch != int64(10+p) || !x.Ranges.Equal(want) {
			t.Errorf("partition %d renewed with epoch %d ranges %s; want %d and %s", p, x.Epoch, x.Ranges, 10+p, want)
		}
	}
	if got, want := low.lease.end.Load(), int64(now.Sub(low.lease.born)+length); got != want || got <= lowEnd {
		t.Errorf("renewed lease ends at %v; want %v, a lease from the round", time.Duration(got), time.Duration(want))
	}
	if failing.lease.end.Load() != failingEnd {
		t.Error("a renewal that failed extended the lease")
	}
	if !lapsed.lease.held() {
		t.Error("a lapsed lease renewed is not held")
	}
	woken := func(w *worker) bool { return len(w.mail.wake) == 1 }
	if !woken(lapsed) {
		t.Error("the loop of a lease whose lapse ended was not woken; it would not deliver until its next event")
	}
	if _, refusedFlag := refused.mail.takeCtrl(); !refusedFlag || !woken(refused) {
		t.Error("the loop of a refused renewal was not told to flush")
	}
	if woken(low) || woken(failing) || woken(fresh) {
		t.Error("a loop was woken for nothing")
	}
}
