package faults

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/tracking"
)

// Settings of the key-range sharing scenarios: one partition, so that
// every node beyond the first shares it, many keys so that every range
// holds some, and a window of deliveries in flight on every node.
const (
	sharedKeys        = 2000
	sharedMaxInFlight = 32
)

// sharedCluster is a cluster on a one-partition topic with sharing auto
// (the subscription's default), its nodes started with flags.
func sharedCluster(t *testing.T, name string, nodes int, latency func(*testutil.Delivery) time.Duration, flags ...string) *cluster {
	return newCluster(t, name, clusterConfig{
		nodes: nodes, partitions: 1, keys: sharedKeys, maxInFlight: sharedMaxInFlight,
		latency: latency, flags: flags,
	})
}

// Nodes join a one-partition subscription one at a time up to four, each
// taking a key range from the others, then leave with SIGTERM one at a
// time back to one, each handing its ranges back. Every move of a range is
// graceful (drained, flushed and released before its new owner starts),
// so nothing is lost or delivered twice, no key ever has two requests in
// flight across the nodes, keys stay in order, the merged commit never
// passes an unacked offset, and at four nodes every node delivers.
func TestFaultSharedScaleOutAndIn(t *testing.T) {
	testSharedScaleOutAndIn(t, "shared-scale")
}

// The same with the shared read: the reader group shares the partition,
// and its cursor gives up and takes key ranges as the subscription's own
// group would.
func TestFaultSharedReadScaleOutAndIn(t *testing.T) {
	testSharedScaleOutAndIn(t, "shared-read-scale", "--shared-read")
}

func testSharedScaleOutAndIn(t *testing.T, name string, flags ...string) {
	const records, rate, step = 30_000, 600, 6 * time.Second
	c := sharedCluster(t, name, 1, slowerLatency, flags...)
	c.startNodes()
	prod := c.produce(records, rate)
	c.waitClaimed(c.slots[0], time.Minute)

	for len(c.live()) < 4 {
		sleepFor(step)
		slot := c.addNode()
		c.waitClaimed(c.slots[slot], time.Minute)
		t.Logf("  %d nodes at %.1fs", len(c.live()), time.Since(c.started).Seconds())
	}
	// Every node delivers its share for a while before the first leaves.
	four := time.Now()
	fourNames := c.liveNames()
	sleepFor(step)
	fourEnd := time.Now()

	for len(c.live()) > 1 {
		live := c.live()
		slot := live[c.rng.IntN(len(live))]
		c.terminate(slot, true)
		t.Logf("  %s left at %.1fs: %d nodes", c.slots[slot].Name, time.Since(c.started).Seconds(), len(c.live()))
		sleepFor(step)
	}
	prod.wait(2 * time.Minute)
	o := c.finish()
	if o.Records != records {
		t.Errorf("%d records in the log, want %d", o.Records, records)
	}
	if o.Duplicates != 0 {
		t.Errorf("%d duplicates after graceful range handovers, want 0", o.Duplicates)
	}
	if o.Overlaps+o.FailureOverlaps != 0 {
		t.Errorf("%d requests sent while another of their key was in flight, want 0", o.Overlaps+o.FailureOverlaps)
	}
	by := c.deliveredBy(four, fourEnd)
	t.Logf("  deliveries per node with four nodes (%.1fs): %v", fourEnd.Sub(four).Seconds(), by)
	for _, name := range fourNames {
		if by[name] == 0 {
			t.Errorf("%s delivered nothing while four nodes shared the partition (%v)", name, by)
		}
	}
	c.logClaims()
	t.Logf("  node logs: %v", c.logLines("partition claimed", "key ranges released", "partitions revoked", "partitions lost", "fenced", "drain deadline passed"))
}

// Four nodes share one partition while one of them dies with kill -9
// every five seconds and is restarted at once. Nothing is lost, keys stay
// in order, the merged commit never passes an offset some sharer had not
// acked, and duplicates and overlaps stay within what was in flight or
// unflushed at each kill; no two live nodes ever have a key in flight
// together.
func TestFaultSharedKill9EveryFiveSeconds(t *testing.T) {
	testSharedKill9EveryFiveSeconds(t, "shared-kill9")
}

// The same with the shared read: the reader group shares the partition,
// and a killed node's ranges go to the others' cursors.
func TestFaultSharedReadSharersKill9EveryFiveSeconds(t *testing.T) {
	testSharedKill9EveryFiveSeconds(t, "shared-read-sharers-kill9", "--shared-read")
}

func testSharedKill9EveryFiveSeconds(t *testing.T, name string, flags ...string) {
	const records, rate, every, storm = 27_000, 600, 5 * time.Second, 40 * time.Second
	c := sharedCluster(t, name, 4, slowerLatency, flags...)
	c.startNodes()
	prod := c.produce(records, rate)
	for _, slot := range c.live() {
		c.waitClaimed(c.slots[slot], time.Minute)
	}
	kills := 0
	for end := time.Now().Add(storm); time.Now().Before(end); {
		sleepFor(every)
		live := c.live()
		slot := live[c.rng.IntN(len(live))]
		c.kill(slot)
		c.startSlot(slot)
		kills++
	}
	prod.wait(2 * time.Minute)
	o := c.finish()
	if o.Records != records {
		t.Errorf("%d records in the log, want %d", o.Records, records)
	}
	if o.Overlaps != 0 {
		t.Errorf("%d requests sent by a live node while another live node had their key in flight, want 0", o.Overlaps)
	}
	c.logClaims()
	t.Logf("  %d kills; node logs: %v", kills, c.logLines("partition claimed", "key ranges released", "partitions lost", "fenced", "claim failed"))
}

// rangeSample is one reading of the claims of a partition's key ranges.
type rangeSample struct {
	at     time.Time
	ranges []tracking.RangeState
}

// owner returns the claim holding hash h in the sample.
func (s rangeSample) owner(h uint32) (tracking.RangeState, bool) {
	for _, r := range s.ranges {
		if h >= r.Lo && h < r.Hi {
			return r, true
		}
	}
	return tracking.RangeState{}, false
}

// Three nodes share one partition; one is stopped (SIGSTOP) with
// deliveries in flight for twice the session timeout, so the group gives
// its key ranges to the others, then it resumes and receives its late
// answers. Its tracking writes are refused: the claims of its ranges never
// go back to it under its old generation, and no range's epoch goes back;
// its commits are refused (the commit never moves backwards nor passes an
// unacked offset); keys stay in order and nothing is lost.
func TestFaultSharedZombieIsFenced(t *testing.T) {
	const records, rate = 24_000, 600
	const slowFor = 3 * time.Second
	var slow atomic.Value
	slow.Store("")
	c := sharedCluster(t, "shared-zombie", 3, func(d *testutil.Delivery) time.Duration {
		if d.Origin != "" && d.Origin == slow.Load() {
			return slowFor
		}
		return slowerLatency(d)
	})
	c.startNodes()
	prod := c.produce(records, rate)
	for _, slot := range c.live() {
		c.waitClaimed(c.slots[slot], time.Minute)
	}

	pk := c.partitionKeys()[0]
	var mu sync.Mutex
	var samples []rangeSample
	ctx, stopSampling := context.WithCancel(context.Background())
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for ctx.Err() == nil {
			st, err := c.tracker.Load(ctx, []tracking.PartitionKey{pk})
			if s, ok := st[pk]; err == nil && ok {
				mu.Lock()
				samples = append(samples, rangeSample{time.Now(), s.Ranges})
				mu.Unlock()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	t.Cleanup(func() {
		stopSampling()
		<-sampled
	})

	// Let the sharers settle, then slow the victim's deliveries down so
	// that it has some in flight when it stops.
	sleepFor(4 * time.Second)
	live := c.live()
	zombie := c.slots[live[c.rng.IntN(len(live))]]
	slow.Store(zombie.Name)
	const wantInFlight = 10
	testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("%s has %d deliveries in flight", zombie.Name, wantInFlight), func() bool {
		return c.sink.InFlightFrom(zombie.Name) >= wantInFlight
	})
	// The zombie's ranges and its generation, as tracking knows them now.
	var mine []tracking.RangeState
	mu.Lock()
	if n := len(samples); n > 0 {
		for _, r := range samples[n-1].ranges {
			if r.Owner == zombie.Name {
				mine = append(mine, r)
			}
		}
	}
	mu.Unlock()
	if len(mine) == 0 {
		t.Fatalf("%s owns no key range in the tracking state while delivering", zombie.Name)
	}
	zombieGen := mine[0].Generation

	stoppedAt := time.Now()
	inFlight := c.inFlightNow()
	c.markFailed(zombie)
	zombie.Signal(syscall.SIGSTOP)
	c.addFailureBound(stoppedAt, inFlight, "SIGSTOP "+zombie.Name)
	t.Logf("  stopped %s, owner of %s (generation %d), for %v with %d requests in flight at the sink (%d of its own)",
		zombie.Name, rangesString(mine), zombieGen, 2*faultSession, sum(inFlight), c.sink.InFlightFrom(zombie.Name))
	sleepFor(2 * faultSession)
	slow.Store("")
	zombie.Signal(syscall.SIGCONT)
	resumedAt := time.Now()
	prod.wait(2 * time.Minute)
	c.finish()
	stopSampling()
	<-sampled

	mu.Lock()
	defer mu.Unlock()
	// Follow the first hash of each of the zombie's ranges.
	for _, zr := range mine {
		h := zr.Lo
		var owners []ownerSample
		for _, s := range samples {
			if r, ok := s.owner(h); ok {
				owners = append(owners, ownerSample{at: s.at, owner: r.Owner, epoch: r.Epoch, gen: r.Generation})
			}
		}
		takenAt, newOwner := checkZombieFenced(t, fmt.Sprintf("hash %d (range %d-%d)", h, zr.Lo, zr.Hi), owners, zombie.Name, zombieGen, stoppedAt, resumedAt)
		if takenAt.IsZero() {
			continue
		}
		t.Logf("  hash %d taken over by %s %.1fs after SIGSTOP", h, newOwner, takenAt.Sub(stoppedAt).Seconds())
	}
	t.Logf("  %d state samples; zombie log: %v", len(samples), zombieLog(c, zombie))
	c.logClaims()
	checkZombieStartsNothing(t, c, zombie.Name, resumedAt)
}

func rangesString(rs []tracking.RangeState) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("%d-%d (epoch %d)", r.Lo, r.Hi, r.Epoch)
	}
	return strings.Join(parts, ",")
}

// waitClaimed waits until p logged that it claimed the partition: with
// sharing, the claim names the key ranges it delivers.
func (c *cluster) waitClaimed(p *testutil.Process, timeout time.Duration) {
	c.t.Helper()
	testutil.WaitFor(c.t, timeout, p.Name+" claims a partition", func() bool {
		return len(claimsOf(p)) > 0
	})
}

// claimsOf returns what p logged of its claims and releases, in order:
// "claimed <ranges>" (or "claimed whole") and "released <ranges>".
func claimsOf(p *testutil.Process) []string {
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return nil
	}
	var out []string
	for line := range strings.SplitSeq(string(data), "\n") {
		switch {
		case strings.Contains(line, `msg="partition claimed"`):
			if r := logValue(line, "ranges"); r != "" {
				out = append(out, "claimed "+r)
			} else {
				out = append(out, "claimed whole")
			}
		case strings.Contains(line, `msg="key ranges released"`):
			out = append(out, "released "+logValue(line, "released")+" keeping "+logValue(line, "keeping"))
		}
	}
	return out
}

// logValue reads key=value from a text log line ("" when absent).
func logValue(line, key string) string {
	i := strings.Index(line, " "+key+"=")
	if i < 0 {
		return ""
	}
	v := line[i+len(key)+2:]
	if strings.HasPrefix(v, `"`) {
		if j := strings.Index(v[1:], `"`); j >= 0 {
			return v[1 : j+1]
		}
	}
	if j := strings.IndexByte(v, ' '); j >= 0 {
		return v[:j]
	}
	return v
}

// logClaims logs the key ranges each process claimed and released, a run
// of the same line once with its count.
func (c *cluster) logClaims() {
	for _, p := range c.procs {
		var out []string
		lines := claimsOf(p)
		for i := 0; i < len(lines); {
			j := i
			for j < len(lines) && lines[j] == lines[i] {
				j++
			}
			if j-i > 1 {
				out = append(out, fmt.Sprintf("%s (×%d)", lines[i], j-i))
			} else {
				out = append(out, lines[i])
			}
			i = j
		}
		c.t.Logf("  %s: %s", p.Name, strings.Join(out, "; "))
	}
}

// liveNames returns the names of the live processes.
func (c *cluster) liveNames() []string {
	var out []string
	for _, s := range c.live() {
		out = append(out, c.slots[s].Name)
	}
	return out
}

// deliveredBy counts, per sending process, the requests the sink answered
// that started in [from, to).
func (c *cluster) deliveredBy(from, to time.Time) map[string]int {
	out := map[string]int{}
	for _, d := range c.sink.Deliveries() {
		if !d.Start.Before(from) && d.Start.Before(to) {
			out[d.Origin]++
		}
	}
	return out
}
