package tracking

import (
	"context"
	"errors"
	"testing"
	"time"
)

// pkB is a partition of pkA's subscription that pkA's tests leave alone.
var pkB = PartitionKey{Subscription: "sub-1", Topic: "orders", Partition: 4}

// A renewal confirms a claim exactly when a flush of it would be taken:
// held ranges at the claim's epoch. A claim taken over, one that released
// ranges it still declares, and a key Redis lost each answer on their own,
// and the renewal writes nothing but the claim's time.
func TestRenewalConfirmsExactlyTheClaimsAFlushWouldConfirm(t *testing.T) {
	s, _, _ := newStore(t, Config{})
	ctx := context.Background()
	whole := mustClaimRanges(t, s, pkA, "node-a", 1, nil)
	flushOne(t, s, pkA, Flush{Epoch: whole.Epoch, Watermark: 7, Fetched: 9, Committed: -1, Pending: 2})
	before := load(t, s, pkA)

	lowerOwner := mustClaimRanges(t, s, pkB, "node-a", 1, lower)
	upperOwner := mustClaimRanges(t, s, pkB, "node-b", 1, upper)
	time.Sleep(5 * time.Millisecond) // the server's clock moves on
	errs := s.RenewRanges(ctx, []PartitionRenewal{
		{Key: pkA, Epoch: whole.Epoch},
		{Key: pkB, Epoch: lowerOwner.Epoch, Ranges: lower},
		{Key: pkB, Epoch: upperOwner.Epoch, Ranges: upper},
		{Key: pkB, Epoch: lowerOwner.Epoch, Ranges: upper},              // not its ranges
		{Key: pkB, Epoch: lowerOwner.Epoch, Ranges: nil},                // more than it holds
		{Key: pkA, Epoch: whole.Epoch + 100},                            // an epoch never given
		{Key: PartitionKey{Subscription: "gone", Topic: "t"}, Epoch: 1}, // no state at all
	})
	want := []error{nil, nil, nil, ErrFenced, ErrFenced, ErrFenced, ErrStateLost}
	for i, w := range want {
		if w == nil && errs[i] != nil || w != nil && !errors.Is(errs[i], w) {
			t.Errorf("renewal %d = %v, want %v", i, errs[i], w)
		}
	}
	after := load(t, s, pkA)
	if after.Watermark != before.Watermark || after.Fetched != before.Fetched || after.Pending != before.Pending {
		t.Errorf("a renewal changed the state: before %+v, after %+v", before, after)
	}
	if !after.Updated.After(before.Updated) {
		t.Errorf("a renewal left the claim's time at %v (before %v); want it stamped", after.Updated, before.Updated)
	}

	// Taken over: the old epoch renews no more, the new one does.
	newer := mustClaimRanges(t, s, pkA, "node-b", 2, nil)
	errs = s.RenewRanges(ctx, []PartitionRenewal{{Key: pkA, Epoch: whole.Epoch}, {Key: pkA, Epoch: newer.Epoch}})
	if !errors.Is(errs[0], ErrFenced) || errs[1] != nil {
		t.Errorf("after a takeover: old epoch %v (want fenced), new epoch %v (want nil)", errs[0], errs[1])
	}

	// Released ranges are not held any more.
	if err := s.ReleaseRanges(ctx, pkB, upperOwner.Epoch, topQuad); err != nil {
		t.Fatal(err)
	}
	errs = s.RenewRanges(ctx, []PartitionRenewal{{Key: pkB, Epoch: upperOwner.Epoch, Ranges: upper}})
	if !errors.Is(errs[0], ErrFenced) {
		t.Errorf("renewing ranges partly released = %v, want fenced", errs[0])
	}
}
