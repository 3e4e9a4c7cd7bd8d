package dispatcher

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/keyrange"
	"github.com/keyhook/keyhook/partition"
	"github.com/keyhook/keyhook/subscription"
)

// A cursor commits under its subscription's group, which has no member,
// so Kafka takes the commit without a generation and cannot fence it: the
// worker's ownership is the only gate. A partition whose lease lapsed (its
// node stopped past the session and resumed before it heard it was
// fenced) commits nothing, though its watermark is above its last commit:
// the new owner may have committed further, and the commit would move
// back. The owned partition beside it commits.
func TestACursorCommitsOnlyThePartitionsItStillOwns(t *testing.T) {
	const length = 8 * time.Second
	brokers := testutil.Kfake(t, 2, "t")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	owned := leasedWorker(t, length)
	g := owned.g
	g.sub = &subscription.Subscription{ID: "s", Topics: []string{"t"}}
	g.log = discard
	g.rd = &reader{}
	g.rd.cl.Store(cl)
	g.n.commits = newCommitters([]kgo.Opt{kgo.SeedBrokers(brokers...)})
	defer g.n.commits.close()

	m, err := partition.New[*kgo.Record](partition.Config{MaxWindow: 10})
	if err != nil {
		t.Fatal(err)
	}
	m.Claim(nil)
	lapsed := &worker{g: g, m: m, lease: newLease(length), mail: newMailbox(nil)}
	lapsed.lease.renew(lapsed.since()-2*length, discard) // ended a lease ago
	if lapsed.owned() || !owned.owned() {
		t.Fatalf("owned() = %v for the lapsed lease and %v for the held one; the test needs false and true", lapsed.owned(), owned.owned())
	}
	whole := keyrange.Full()
	for i, w := range []*worker{owned, lapsed} {
		w.tp = topicPartition{"t", int32(i)}
		w.pub.ranges.Store(&whole)
		w.pub.commitable.Store(int64(50 + 30*i))
		w.committed.Store(10)
		if _, ok := w.commitCandidate(); !ok {
			t.Fatalf("partition %d has no commit candidate; the test needs one", i)
		}
	}

	g.commitCursor([]*worker{owned, lapsed})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := kadm.NewClient(cl).FetchOffsets(ctx, g.sub.GroupID())
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := got.Lookup("t", 0); !ok || o.At != 50 {
		t.Errorf("the owned partition's commit = %+v (found %v); want 50", o, ok)
	}
	if o, ok := got.Lookup("t", 1); ok {
		t.Errorf("the partition whose lease lapsed committed %d; a zombie's commit could move the new owner's back", o.At)
	}
	if owned.committed.Load() != 50 || lapsed.committed.Load() != 10 {
		t.Errorf("committed = %d and %d; want 50 for the owned partition and 10 (unchanged) for the lapsed one", owned.committed.Load(), lapsed.committed.Load())
	}
}
