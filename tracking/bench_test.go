package tracking

import (
	"context"
	"fmt"
	"testing"

	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/keyrange"
	"github.com/keyhook/keyhook/tracking/offsets"
)

// BenchmarkFlushRanges measures one tick of a node: a pipelined flush of
// 100 partitions, held whole (every deployment with no more nodes than
// partitions) or as one of four sharers of each.
func BenchmarkFlushRanges(b *testing.B) {
	for _, sharers := range []int{1, 4} {
		b.Run(fmt.Sprint(sharers, " sharers"), func(b *testing.B) {
			ctx := context.Background()
			s, err := New(testutil.StartRedis(b).Client(), Config{})
			if err != nil {
				b.Fatal(err)
			}
			acked := new(offsets.Set)
			for o := int64(1000); o < 1200; o += 3 {
				acked.AddOffset(o)
			}
			var fs []PartitionFlush
			for p := range int32(100) {
				pk := PartitionKey{Subscription: "sub-1", Topic: "orders", Partition: p}
				for i, r := range keyrange.Split(sharers) {
					c, err := s.ClaimRanges(ctx, pk, fmt.Sprint("node-", i), 1, "", keyrange.Set{r})
					if err != nil {
						b.Fatal(err)
					}
					f := Flush{Epoch: c.Epoch, Ranges: keyrange.Set{r}, Acked: acked, Watermark: 999, Fetched: 1200, Committed: 900}
					if i > 0 {
						// The other sharers flush once; the benchmark
						// times the first one's ticks.
						if r := s.FlushRanges(ctx, []PartitionFlush{{Key: pk, Flush: f}})[0]; r.Err != nil {
							b.Fatal(r.Err)
						}
						continue
					}
					fs = append(fs, PartitionFlush{Key: pk, Flush: f})
				}
			}
			for b.Loop() {
				for _, r := range s.FlushRanges(ctx, fs) {
					if r.Err != nil {
						b.Fatal(r.Err)
					}
				}
			}
		})
	}
}
