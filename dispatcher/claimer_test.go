package dispatcher_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
)

// claimRounds counts a tracker's rounds of claims and the claims made.
type claimRounds struct {
	*tracking.Store
	mu           sync.Mutex
	rounds, made int
}

func (c *claimRounds) ClaimMany(ctx context.Context, cs []tracking.PartitionClaim) []tracking.ClaimResult {
	res := c.Store.ClaimMany(ctx, cs)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rounds++
	for _, r := range res {
		if r.Err == nil {
			c.made++
		}
	}
	return res
}

func (c *claimRounds) counts() (rounds, made int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rounds, c.made
}

// A node given many partitions at once claims them in a few pipelined
// rounds, not one Redis call each, and every partition's claim reaches
// its own worker: each subscription delivers the record of each
// partition. A node restarting with 4,000 cursor partitions made 4,000
// calls at once; hundreds ran past their deadline waiting for a pooled
// connection and were retried.
func TestANodeClaimsItsPartitionsInFewRounds(t *testing.T) {
	const topic, parts, subs = "claims", 8, 20
	brokers := testutil.Kfake(t, parts, topic)
	rdb := testutil.StartRedis(t).Client()
	store, err := tracking.New(rdb, tracking.Config{})
	if err != nil {
		t.Fatal(err)
	}
	counter := &claimRounds{Store: store}
	var ss staticSubs
	var sinks []*testutil.Sink
	for i := range subs {
		sink := testutil.StartSink(t)
		sinks = append(sinks, sink)
		ss = append(ss, newSub("claims-"+strconv.Itoa(i), topic, sink.URL, subscription.OrderKey, 16))
	}
	startNodeTracking(t, brokers, counter, ss, nil)
	// Each subscription starts at the end of the topic once it claimed.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, made := counter.counts(); made == parts*subs {
			break
		}
		if time.Now().After(deadline) {
			_, made := counter.counts()
			t.Fatalf("%d claims made after 60s, want one per partition of each subscription, %d", made, parts*subs)
		}
	}
	produce(t, brokers, topic, parts, func(i int) string { return fmt.Sprintf("key-%d", i) }, func(i int) int32 { return int32(i) })
	for _, sink := range sinks {
		sink.WaitAcked(t, parts, 60*time.Second)
	}

	rounds, made := counter.counts()
	t.Logf("%d claims made in %d rounds", made, rounds)
	if made != parts*subs {
		t.Fatalf("%d claims made, want one per partition of each subscription, %d: a claim again", made, parts*subs)
	}
	// The subscriptions' cursors start one after another, so how many
	// claims a round gathers depends on the machine's load (5 rounds on
	// an idle machine, 22 under the race detector); a call each makes
	// 160. That the claims waiting go together is the claimer's own test.
	if rounds > made/2 {
		t.Errorf("%d claims made in %d rounds; want them gathered (at most %d rounds), not a call each", made, rounds, made/2)
	}
}
