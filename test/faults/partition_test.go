package faults

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
)

// Settings of the network partition scenarios.
const (
	// cutFor is how long a partition lasts: three session timeouts, so
	// the group gives the cut node's partitions away well within it.
	cutFor = 3 * faultSession
	// faultLease is how long the nodes' ownership holds without an
	// answer: the session timeout less a heartbeat (a fifth of it).
	faultLease = faultSession - faultSession/5
	// cutSlack is what may pass between the pool's check and a
	// request's arrival at the sink on a loaded machine: most of the
	// heartbeat interval the lease keeps before the group can give the
	// partitions away.
	cutSlack = time.Second
	// cutPartitions, cutKeys and cutRate: one subscription over four
	// partitions, about 150 records a second over 200 keys.
	cutPartitions, cutKeys, cutRate = 4, 200, 150
)

// cutRetry makes every retry of a failing key wait the second its
// Retry-After asks, not the growing backoff: the records failing at the
// cut are then tried again every second throughout it, the moments the
// group hands the partitions over among them.
var cutRetry = subscription.RetryPolicy{MaxIntervalMS: 1000}

// failingAroundTheCut makes a fifth of the keys answer 503 with
// Retry-After: 1 while on is set, so retries wait at the cut.
func failingAroundTheCut(on *atomic.Bool) (status func(*testutil.Delivery) int, retryAfter func(*testutil.Delivery) int) {
	failing := func(d *testutil.Delivery) bool {
		var h uint32
		for i := 0; i < len(d.Key); i++ {
			h = h*31 + uint32(d.Key[i])
		}
		return on.Load() && h%5 == 0
	}
	status = func(d *testutil.Delivery) int {
		if failing(d) {
			return 503
		}
		return 200
	}
	retryAfter = func(*testutil.Delivery) int { return 1 }
	return status, retryAfter
}

// A node cut off from Kafka, but not from Redis nor its endpoint, while
// another node is healthy: every connection of the cut node to the broker
// goes through a proxy (the broker's second listener, which advertises
// it), and the proxy stops forwarding (hang: packets vanish, sockets stay
// open) or resets every connection, for three session timeouts. The cut
// node goes on writing its state to Redis, so only the coordinator's
// silence can tell it that the group is giving its partitions away: it
// must stop starting deliveries, first attempts and retries, before the
// other node takes them over. Retries wait at the cut (a fifth of the
// keys answer 503 with Retry-After: 1 around it); the backlog variants
// cut it while both nodes work through a backlog. No request of one node
// may be in flight beside a request of the same key of the other; nothing
// is lost or reordered, and duplicates stay within what the takeover
// allows.
func TestFaultCutFromKafka(t *testing.T) {
	for _, tc := range []struct {
		name           string
		reset, backlog bool
	}{
		{name: "hang"},
		{name: "reset", reset: true},
		{name: "hang-backlog", backlog: true},
		{name: "reset-backlog", reset: true, backlog: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var failing atomic.Bool
			status, retryAfter := failingAroundTheCut(&failing)
			latency := smallLatency
			if tc.backlog {
				latency = slowerLatency
			}
			c := newCluster(t, "kafka-cut-"+tc.name, clusterConfig{
				nodes: 2, partitions: cutPartitions, keys: cutKeys,
				latency: latency, status: status, retryAfter: retryAfter, retry: cutRetry,
			})
			proxy := testutil.KafkaCut(t)
			cut := c.addNode("--kafka-brokers", proxy.Addr())
			healthy := c.addNode()
			c.waitOwned(healthy, time.Minute)
			c.waitOwned(cut, time.Minute)
			cutNode := c.slots[cut].Name

			var prod *producer
			if tc.backlog {
				// A backlog both nodes are still working through when
				// the cut comes, and the steady flow after it.
				backlog := c.produce(30_000, 0)
				backlog.wait(time.Minute)
				sleepFor(2 * time.Second)
				prod = c.produce(int(cutRate*(cutFor+8*time.Second)/time.Second), cutRate)
			} else {
				prod = c.produce(int(cutRate*(cutFor+14*time.Second)/time.Second), cutRate)
				sleepFor(6 * time.Second)
			}
			failing.Store(true)
			sleepFor(1500 * time.Millisecond)

			cutAt := time.Now()
			inFlight := c.sink.InFlightFrom(cutNode)
			if tc.reset {
				proxy.Reset()
			} else {
				proxy.Hang()
			}
			unflushed := c.sink.CompletedSince(cutAt.Add(-unflushedWindow))
			c.addBound(inFlight+unflushed, fmt.Sprintf("%s cut from Kafka: %d of its requests in flight + %d completed in the last %v", cutNode, inFlight, unflushed, unflushedWindow))
			sleepFor(cutFor)
			proxy.Pass()
			healedAt := time.Now()
			sleepFor(2 * time.Second)
			failing.Store(false)
			prod.wait(2 * time.Minute)
			c.finish()

			checkCut(t, c, cutNode, cutAt, healedAt)
			t.Logf("  %s cut from Kafka (%s) for %v; cut node log: %v", cutNode, tc.name, cutFor,
				(&cluster{procs: c.procs[:1]}).logLines("group membership not confirmed", "confirmed again", "partitions lost", "fenced", "partition claimed"))
		})
	}
}

// A node cut off from Redis, but not from Kafka, while another node is
// healthy: the node goes on heartbeating, so it keeps its partitions, and
// its ownership lease runs out instead. It must stop starting deliveries
// until Redis answers again; the other node never takes its partitions
// over, so no request is in flight beside another of its key, nothing is
// lost or reordered, and no record is delivered twice.
func TestFaultCutFromRedis(t *testing.T) {
	var failing atomic.Bool
	status, retryAfter := failingAroundTheCut(&failing)
	c := newCluster(t, "redis-cut", clusterConfig{
		nodes: 2, partitions: cutPartitions, keys: cutKeys,
		latency: smallLatency, status: status, retryAfter: retryAfter, retry: cutRetry,
	})
	proxy := testutil.StartProxy(t, "127.0.0.1:0", c.redis.Addr)
	cut := c.addNode("--redis-url", "redis://"+proxy.Addr()+"/0")
	healthy := c.addNode()
	c.waitOwned(healthy, time.Minute)
	c.waitOwned(cut, time.Minute)
	cutNode := c.slots[cut].Name
	prod := c.produce(int(cutRate*(cutFor+14*time.Second)/time.Second), cutRate)
	sleepFor(6 * time.Second)
	failing.Store(true)
	sleepFor(1500 * time.Millisecond)

	cutAt := time.Now()
	proxy.Hang()
	sleepFor(cutFor)
	proxy.Pass()
	healedAt := time.Now()
	sleepFor(2 * time.Second)
	failing.Store(false)
	prod.wait(2 * time.Minute)
	o := c.finish()

	if o.Duplicates != 0 {
		t.Errorf("%d duplicates, want 0: the node cut from Redis kept its partitions", o.Duplicates)
	}
	checkCut(t, c, cutNode, cutAt, healedAt)
	t.Logf("  %s cut from Redis for %v; cut node log: %v", cutNode, cutFor,
		(&cluster{procs: c.procs[:1]}).logLines("ownership not confirmed", "confirmed again", "partitions lost", "fenced", "flush failed"))
}

// checkCut checks what a node cut from Kafka or from Redis sent: no
// request of one node in flight beside one of the same key of another.
// It also counts the cut node's requests that reached the sink more than
// a lease after the cut (with slack), until it healed, but only reports
// them: the sink stamps a new connection's first request once it has
// named its sender (a /proc scan on the accept loop), so on a loaded
// machine a burst of new connections is stamped up to seconds late.
// The dispatcher's own test (TestNoDeliveryStartsOnceTheCoordinatorStops
// Answering) asserts the lease's end, with a sink that names no sender.
func checkCut(t *testing.T, c *cluster, cutNode string, cutAt, healedAt time.Time) {
	t.Helper()
	var cross []string
	for _, ov := range c.sink.KeyOverlaps() {
		if ov.Earlier.Origin != ov.Later.Origin {
			cross = append(cross, ov.String())
		}
	}
	var late []string
	var fromCut, retriesFromCut int
	for _, d := range c.sink.Deliveries() {
		if d.Origin != cutNode || d.Start.Before(cutAt) || d.Start.After(healedAt) {
			continue
		}
		at := d.Start.Sub(cutAt)
		if at > faultLease+cutSlack {
			late = append(late, fmt.Sprintf("%d@%d key %s attempt %d at +%v", d.Partition, d.Offset, d.Key, d.Attempt, at.Round(time.Millisecond)))
			continue
		}
		fromCut++
		if d.Attempt > 1 {
			retriesFromCut++
		}
	}
	t.Logf("  cross-node overlaps=%d; %s started %d requests (%d retries) within the lease after the cut, %d after it until the heal",
		len(cross), cutNode, fromCut, retriesFromCut, len(late))
	if len(cross) > 0 {
		t.Errorf("%d requests sent while another node's request of their key was in flight; first: %s", len(cross), strings.Join(cross[:min(len(cross), 5)], "; "))
	}
	if len(late) > 0 {
		t.Logf("  %s's requests stamped more than a lease (%v) after it was cut: %d; first: %v", cutNode, faultLease, len(late), late[:min(len(late), 5)])
	}
}
