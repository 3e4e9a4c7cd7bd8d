package dispatcher

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/keyhook/keyhook/tracking"
)

// gatedClaims is a tracker whose rounds of claims each wait for the test
// to open its gate (or for the round's context to end), and which records
// every round's size. A claim made answers the partition + 1 as its epoch.
type gatedClaims struct {
	noTracker
	entered chan int
	gate    chan struct{}

	mu     sync.Mutex
	rounds []int
}

func newGatedClaims() *gatedClaims {
	return &gatedClaims{entered: make(chan int, 64), gate: make(chan struct{})}
}

func (g *gatedClaims) ClaimMany(ctx context.Context, cs []tracking.PartitionClaim) []tracking.ClaimResult {
	g.mu.Lock()
	g.rounds = append(g.rounds, len(cs))
	g.mu.Unlock()
	g.entered <- len(cs)
	out := make([]tracking.ClaimResult, len(cs))
	select {
	case <-g.gate:
		for i, c := range cs {
			out[i].Claim.Epoch = int64(c.Key.Partition) + 1
		}
	case <-ctx.Done():
		for i := range out {
			out[i].Err = ctx.Err()
		}
	}
	return out
}

func (g *gatedClaims) sizes() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]int(nil), g.rounds...)
}

// startGatedClaimer runs a claimer over a gated tracker; stop ends it
// and returns once its run did.
func startGatedClaimer() (*gatedClaims, *claimer, func()) {
	tr := newGatedClaims()
	c := newClaimer(tr, discard)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.run(ctx) }()
	return tr, c, func() { cancel(); <-done }
}

// claimWorkers are n workers of partitions 0..n-1 with their claims
// submitted to c, each counted in its own bg.
func claimWorkers(ctx context.Context, c *claimer, from, n int) []*worker {
	ws := make([]*worker, n)
	for i := range ws {
		p := int32(from + i)
		w := &worker{ctx: ctx, pk: tracking.PartitionKey{Subscription: "s", Topic: "t", Partition: p}}
		w.bg.Add(1)
		c.submit(claimReq{w: w, c: tracking.PartitionClaim{Key: w.pk, Owner: "n1", Generation: 1}})
		ws[i] = w
	}
	return ws
}

// answered waits for every worker's claim to be answered and returns the
// answers.
func answered(t *testing.T, ws []*worker) []claimResult {
	t.Helper()
	out := make([]claimResult, len(ws))
	for i, w := range ws {
		done := make(chan struct{})
		go func() { w.bg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("the claim of partition %d was never answered", w.pk.Partition)
		}
		cs, _, _ := w.mail.takeTracking()
		if len(cs) != 1 {
			t.Fatalf("partition %d got %d claim answers, want 1", w.pk.Partition, len(cs))
		}
		out[i] = cs[0]
	}
	return out
}

// The claims that come while a round is in flight go together in the
// next one, at most maxClaimRound per round, made in chunks of roundChunk
// all in flight at once, and each worker gets its own partition's answer:
// a node restarting with thousands of cursor partitions made as many
// Redis calls at once, and hundreds of them ran past their deadline
// waiting for a pooled connection; then, in rounds of one call each, took
// 6 s to claim 4,000.
func TestClaimsWaitingBehindARoundGoTogether(t *testing.T) {
	tr, c, stop := startGatedClaimer()
	defer stop()

	first := claimWorkers(context.Background(), c, 0, 1)
	if n := <-tr.entered; n != 1 {
		t.Fatalf("a lone claim went in a round of %d", n)
	}
	const more = 2*maxClaimRound + 76
	rest := claimWorkers(context.Background(), c, 1, more)
	tr.gate <- struct{}{} // the lone claim's round ends
	// Well before a chunk's deadline, which one after the other would wait
	// for.
	inFlight := time.After(claimTimeout / 2)
	for i := range roundParallel {
		select {
		case n := <-tr.entered:
			if n != roundChunk {
				t.Fatalf("a chunk of the next round made %d claims, want %d", n, roundChunk)
			}
		case <-inFlight:
			t.Fatalf("%d of the next round's chunks in flight at once, want %d", i, roundParallel)
		}
	}
	close(tr.gate)
	res := answered(t, append(first, rest...))
	for i, r := range res {
		if r.err != nil || r.c.Epoch != int64(i)+1 {
			t.Fatalf("partition %d answered epoch %d, err %v; want its own claim's epoch %d", i, r.c.Epoch, r.err, i+1)
		}
	}
	want := []int{1}
	for range 2 * roundParallel {
		want = append(want, roundChunk)
	}
	want = append(want, 76)
	if got := tr.sizes(); !slices.Equal(got, want) {
		t.Fatalf("calls of %v claims, want %v", got, want)
	}
}

// A claimer stopping answers every claim still waiting with its
// context's error: a worker's stop waits for its claim's answer.
func TestAStoppingClaimerAnswersEveryClaim(t *testing.T) {
	tr, c, stop := startGatedClaimer()

	inFlight := claimWorkers(context.Background(), c, 0, 1)
	<-tr.entered
	waiting := claimWorkers(context.Background(), c, 1, 5)
	stop()
	for _, r := range answered(t, append(inFlight, waiting...)) {
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("a claim answered %v when the claimer stopped, want context.Canceled", r.err)
		}
	}
	if got := tr.sizes(); len(got) != 1 {
		t.Fatalf("rounds of %v after the stop, want only the one in flight", got)
	}
}

// A stopping worker's claim is answered with its context's error, and
// costs no call, as its own call would have failed at once.
func TestAStoppingWorkersClaimCostsNoCall(t *testing.T) {
	tr, c, stop := startGatedClaimer()
	defer stop()

	inFlight := claimWorkers(context.Background(), c, 0, 1)
	<-tr.entered
	stopped, stop := context.WithCancel(context.Background())
	stop()
	gone := claimWorkers(stopped, c, 1, 3)
	close(tr.gate)
	if r := answered(t, inFlight)[0]; r.err != nil {
		t.Fatalf("the claim in flight answered %v", r.err)
	}
	for _, r := range answered(t, gone) {
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("a stopping worker's claim answered %v, want context.Canceled", r.err)
		}
	}
	if got := tr.sizes(); len(got) != 1 {
		t.Fatalf("rounds of %v, want only the first: the stopping workers' claims need none", got)
	}
}

// A claim that waits behind another round has its lease counted from
// when its own round sends it, not from when it was asked for: at a
// restart thousands of claims queue for seconds, and leases counted from
// the asking ran out before their first renewal.
func TestAClaimsLeaseRunsFromItsRoundNotFromWhenItWaited(t *testing.T) {
	tr, c, stop := startGatedClaimer()
	defer stop()

	first := claimWorkers(context.Background(), c, 0, 1)
	<-tr.entered // the first round holds the claimer
	w := &worker{ctx: context.Background(), pk: tracking.PartitionKey{Subscription: "s", Topic: "t", Partition: 1}, lease: newLease(8 * time.Second)}
	w.bg.Add(1)
	asked := w.since()
	c.submit(claimReq{w: w, sent: asked, c: tracking.PartitionClaim{Key: w.pk, Owner: "n1", Generation: 1}})
	const waited = 300 * time.Millisecond
	time.Sleep(waited)
	close(tr.gate)
	answered(t, first)
	res := answered(t, []*worker{w})[0]
	if res.err != nil {
		t.Fatal(res.err)
	}
	if res.sent < asked+waited {
		t.Fatalf("the lease runs from %v on the worker's clock, asked at %v: it lost the %v the claim waited for its round", res.sent, asked, waited)
	}
	if now := w.since(); res.sent > now {
		t.Fatalf("the lease runs from %v, after the answer came (%v)", res.sent, now)
	}
}
