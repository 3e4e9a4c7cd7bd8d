package dispatcher

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/partition"
)

// An idle partition's loop wakes when its ownership lease runs low, half
// a lease before it ends, so the flush of that turn renews it before it
// lapses. The membership's confirmation, the other thing an idle loop
// waits for, ends as late as the lease itself: waking only for it, the
// partition would stop delivering until a write confirms the claim again.
func TestAnIdlePartitionWakesToRenewItsLeaseBeforeItRunsOut(t *testing.T) {
	const length = 4 * time.Second
	m, err := partition.New[*kgo.Record](partition.Config{MaxWindow: 10})
	if err != nil {
		t.Fatal(err)
	}
	m.Claim(nil)
	g := &group{n: &Node{cfg: Config{Tuning: Tuning{FlushInterval: 100 * time.Millisecond}}}, live: newLiveness(length, nil)}
	w := &worker{g: g, m: m, lease: newLease(length)}
	now := time.Now()
	// The tracker and the coordinator both confirmed just now, each for
	// a whole lease.
	w.lease.renew(w.since(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	g.live.until.Store(int64(now.Sub(g.live.born) + length))

	next := w.nextDue(now)
	if next.IsZero() {
		t.Fatal("an owned idle partition's loop is never due; its lease would run out")
	}
	if low := w.lease.lowAt(); next.After(low) {
		t.Errorf("the loop is next due in %v, after its lease runs low in %v; want it to wake to renew the lease by then",
			next.Sub(now).Round(time.Millisecond), low.Sub(now).Round(time.Millisecond))
	}
	if !next.After(now) {
		t.Errorf("the loop is due at once (%v), want it to sleep until something is due", next.Sub(now))
	}
}
