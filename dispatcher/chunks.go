package dispatcher

import (
	"sync"
	"sync/atomic"
)

// A node-wide round of tracking writes (the flusher's, the renewer's) is
// made in chunks of roundChunk partitions (one script call, tracking's
// maxRound), at most roundParallel of them at once, each under its own
// deadline (flushTimeout). One deadline over a whole round failed every
// partition of a node whose two cores were full: at 1,000 subscriptions
// a flush round is 3,600 partitions, and the flusher, one goroutine among
// hundreds waiting for a core, got a 10 ms turn every 120 ms or so; the
// round outran its 2 s, and every write of it was thrown away and made
// again. A chunk is a few milliseconds of work, and several at once get
// several turns.
const (
	roundChunk    = 256
	roundParallel = 4
)

// chunksOf is how many chunks a round of n partitions is made in.
func chunksOf(n int) int { return (n + roundChunk - 1) / roundChunk }

// inChunks calls do for each chunk c, partitions [lo, hi), of a round of
// n, at most roundParallel at once, and returns once every call returned.
// A round of one chunk runs on the caller's goroutine; the goroutines of
// a larger one are the caller's, which waits for them.
func inChunks(n int, do func(c, lo, hi int)) {
	chunks := chunksOf(n)
	chunk := func(c int) { do(c, c*roundChunk, min((c+1)*roundChunk, n)) }
	if chunks <= 1 {
		if chunks == 1 {
			chunk(0)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(roundParallel, chunks) {
		wg.Go(func() {
			for c := int(next.Add(1) - 1); c < chunks; c = int(next.Add(1) - 1) {
				chunk(c)
			}
		})
	}
	wg.Wait()
}
