package offsets

import (
	"math/rand/v2"
	"testing"
)

// ackOrder returns a permutation of [0, n) in which each offset is acked
// while at most window offsets above the watermark are outstanding: the
// shape produced by key lanes acking concurrently over an in-flight window.
func ackOrder(n, window int, rng *rand.Rand) []int64 {
	out := make([]int64, 0, n)
	pending := make([]int64, 0, window)
	next := int64(0)
	for len(out) < n {
		for len(pending) < window && next < int64(n) {
			pending = append(pending, next)
			next++
		}
		i := rng.IntN(len(pending))
		out = append(out, pending[i])
		pending[i] = pending[len(pending)-1]
		pending = pending[:len(pending)-1]
	}
	return out
}

// BenchmarkAddOffsetOutOfOrder measures the per-ack cost of the partition
// worker's hot path: acks arriving shuffled within a window of 1000 above
// the watermark, the watermark recomputed after each ack and the set
// trimmed whenever it moves.
func BenchmarkAddOffsetOutOfOrder(b *testing.B) {
	const period = 1 << 16
	order := ackOrder(period, 1000, rand.New(rand.NewPCG(42, 7)))
	var s Set
	var watermark, base int64
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := i % period
		if k == 0 && i > 0 {
			base += period
		}
		s.AddOffset(base + order[k])
		if w := s.Watermark(watermark); w != watermark {
			watermark = w
			s.TrimBelow(watermark)
		}
	}
}
