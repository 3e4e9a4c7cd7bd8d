package dispatcher

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/keyhook/keyhook/keyrange"
	"github.com/keyhook/keyhook/tracking"
)

// claimTimeout bounds one call of a round of claims (a chunk of it).
const claimTimeout = 5 * time.Second

// maxClaimRound caps the claims of one round: it is made as the flusher's
// rounds are (chunks.go), in chunks of roundChunk claims, roundParallel
// at once, each under its own claimTimeout; the rest go in the next
// round, at once. One call at a time of 512 claims took a node
// restarting with 4,000 cursor partitions 6 s on a full machine, its
// partitions delivering nothing meanwhile.
const maxClaimRound = roundChunk * roundParallel

// claimer makes the node's claims in pipelined rounds. A round starts as
// soon as a claim waits and none is in flight; the claims that come while
// one is go together in the next. A lone claim costs one round trip, as
// before; a node restarting with 4,000 cursor partitions made 4,000 calls
// at once, which waited for the Redis pool's connections until hundreds
// ran past their deadline and were retried.
//
// The node owns it and runs it until its last group stopped (Run): a
// worker stopping waits for its claim's answer, which run always gives.
type claimer struct {
	tracker Tracker
	log     *slog.Logger
	// wake has room for one signal: a claim is waiting.
	wake chan struct{}

	// mu guards pending.
	mu      sync.Mutex
	pending []claimReq

	// failing is set while rounds fail for want of Redis, said once and
	// not once per partition; only run's goroutine uses it. A refused
	// claim is its partition's news, which its worker says.
	failing bool
}

// claimReq is one worker's claim waiting for a round.
type claimReq struct {
	w *worker
	c tracking.PartitionClaim
	// sent is when the claim was sent, on the worker's clock: its lease
	// runs from then. submit stamps when it was asked for, and its round
	// again when it sends it.
	sent   time.Duration
	ranges keyrange.Set
}

func newClaimer(tracker Tracker, log *slog.Logger) *claimer {
	return &claimer{tracker: tracker, log: log, wake: make(chan struct{}, 1)}
}

// submit queues r for the next round and never blocks. The worker claims
// again only once the answer to this one came back (worker.claiming).
func (c *claimer) submit(r claimReq) {
	c.mu.Lock()
	c.pending = append(c.pending, r)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// run makes rounds until ctx ends, then answers what still waits with
// ctx's error.
func (c *claimer) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			for _, r := range c.take(-1) {
				r.answer(claimResult{ranges: r.ranges, sent: r.sent, err: ctx.Err()})
			}
			return
		case <-c.wake:
			for ctx.Err() == nil && c.round(ctx) {
			}
		}
	}
}

// take removes up to max pending claims (all when max < 0).
func (c *claimer) take(max int) []claimReq {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.pending)
	if max >= 0 && n > max {
		n = max
	}
	reqs := make([]claimReq, n)
	copy(reqs, c.pending)
	c.pending = append(c.pending[:0], c.pending[n:]...)
	return reqs
}

// round makes up to maxClaimRound claims, in chunks each under its own
// deadline, and answers each worker; it reports whether it made any.
func (c *claimer) round(ctx context.Context) bool {
	reqs := c.take(maxClaimRound)
	// A worker stopping gets its context's error, as its own call would
	// have returned.
	live := reqs[:0]
	for _, r := range reqs {
		if err := r.w.ctx.Err(); err != nil {
			r.answer(claimResult{ranges: r.ranges, sent: r.sent, err: err})
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return len(reqs) > 0
	}
	// Each chunk's outcome, for the one line a failing round logs.
	failedIn := make([]int, chunksOf(len(live)))
	firstIn := make([]error, len(failedIn))
	inChunks(len(live), func(ch, lo, hi int) {
		failedIn[ch], firstIn[ch] = c.claim(ctx, live[lo:hi])
	})
	failed := 0
	var first error
	for ch, n := range failedIn {
		failed += n
		if first == nil {
			first = firstIn[ch]
		}
	}
	switch {
	case failed > 0 && !c.failing:
		c.failing = true
		c.log.Warn("claim failed; retrying: the partitions wait unclaimed, delivering nothing", "failed", failed, "of", len(live), "err", first)
	case failed == 0 && c.failing:
		c.failing = false
		c.log.Info("claims made again", "claimed", len(live))
	}
	return true
}

// claim makes reqs' claims in one call under claimTimeout and answers
// each worker; it returns how many failed for want of Redis, and the
// first such error.
func (c *claimer) claim(ctx context.Context, reqs []claimReq) (failed int, first error) {
	// A claim's lease runs from when its call sends it, not from when it
	// was asked for: a node taking thousands of partitions over queues
	// their claims behind earlier rounds for seconds, and leases counted
	// from the asking ran out before their first renewal (261 of 4,000
	// cursor partitions at a restart). The call starts before Redis
	// takes any of its claims, as the lease needs.
	cs := make([]tracking.PartitionClaim, len(reqs))
	for i := range reqs {
		cs[i] = reqs[i].c
		reqs[i].sent = reqs[i].w.since()
	}
	rctx, cancel := context.WithTimeout(ctx, claimTimeout)
	res := c.tracker.ClaimMany(rctx, cs)
	cancel()
	for i, r := range reqs {
		if err := res[i].Err; err != nil && !errors.Is(err, tracking.ErrFenced) {
			failed++
			if first == nil {
				first = err
			}
		}
		r.answer(claimResult{c: res[i].Claim, err: res[i].Err, ranges: r.ranges, sent: r.sent})
	}
	return failed, first
}

// answer hands the worker its claim's result and lets it stop.
func (r claimReq) answer(res claimResult) {
	r.w.mail.postClaim(res)
	r.w.bg.Done()
}
