package tracking

import "context"

// The tests' shorthands for one partition, over the entry points the
// dispatcher uses (ClaimRanges, FlushRanges, ReleaseMany).

// Claim claims the whole of pk, not knowing its topic ID.
func (s *Store) Claim(ctx context.Context, pk PartitionKey, owner string, generation int32) (Claim, error) {
	return s.ClaimRanges(ctx, pk, owner, generation, "", nil)
}

// ClaimTopic claims the whole of pk, of topic ID topicID.
func (s *Store) ClaimTopic(ctx context.Context, pk PartitionKey, owner string, generation int32, topicID string) (Claim, error) {
	return s.ClaimRanges(ctx, pk, owner, generation, topicID, nil)
}

// Flush writes f as pk's state and returns only its error.
func (s *Store) Flush(ctx context.Context, pk PartitionKey, f Flush) error {
	return s.FlushRanges(ctx, []PartitionFlush{{Key: pk, Flush: f}})[0].Err
}

// FlushMany writes fs and returns only their errors.
func (s *Store) FlushMany(ctx context.Context, fs []PartitionFlush) []error {
	errs := make([]error, len(fs))
	for i, r := range s.FlushRanges(ctx, fs) {
		errs[i] = r.Err
	}
	return errs
}

// Release releases every range of pk's claim of epoch, as a node's
// handover does through ReleaseMany: the ranges keep their watermarks
// and the claim's acked offsets for the next owner. It returns ErrFenced when a newer claim took
// some of its ranges, and ErrStateLost when pk's key is gone; nothing is
// written then.
func (s *Store) Release(ctx context.Context, pk PartitionKey, epoch int64) error {
	return s.ReleaseMany(ctx, []PartitionRelease{{Key: pk, Epoch: epoch}})[0]
}
