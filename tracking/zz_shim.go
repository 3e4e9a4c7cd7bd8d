package tracking

import (
	"context"

	"github.com/keyhook/keyhook/keyrange"
)

type Floor struct {
	Range     keyrange.Range
	Watermark int64
}
type FlushResult struct {
	Err       error
	Watermark int64
	Committed int64
}

func (s *Store) ClaimRanges(ctx context.Context, pk PartitionKey, owner string, generation int32, topicID string, ranges keyrange.Set) (Claim, error) {
	return s.ClaimTopic(ctx, pk, owner, generation, topicID)
}
func (s *Store) FlushRanges(ctx context.Context, fs []PartitionFlush) []FlushResult {
	errs := s.FlushMany(ctx, fs)
	out := make([]FlushResult, len(errs))
	for i, e := range errs {
		out[i] = FlushResult{Err: e, Watermark: -1, Committed: -1}
	}
	return out
}
func (s *Store) ReleaseRanges(ctx context.Context, pk PartitionKey, epoch int64, ranges keyrange.Set) error {
	return nil
}
