package dispatcher_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
)

// writeCounter counts the partition states a tracker is given to write.
type writeCounter struct {
	*tracking.Store
	mu     sync.Mutex
	writes map[tracking.PartitionKey]int
}

func (c *writeCounter) FlushRanges(ctx context.Context, fs []tracking.PartitionFlush) []tracking.FlushResult {
	c.mu.Lock()
	for _, f := range fs {
		c.writes[f.Key]++
	}
	c.mu.Unlock()
	return c.Store.FlushRanges(ctx, fs)
}

func (c *writeCounter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, w := range c.writes {
		n += w
	}
	return n
}

// A record sent alone costs one tracking write, not two: its partition's
// state changed by the send is held back until the answer (30 ms here,
// longer than the 20 ms flush interval) and written with it. With a
// thousand subscriptions each partition machine sees about a record at a
// time, and the writes of the sends were half of Redis's work. Every
// record is still acked and committed.
func TestARecordSentAloneCostsOneTrackingWrite(t *testing.T) {
	const topic, n = "one-write", 20
	brokers := testutil.Kfake(t, 1, topic)
	rdb := testutil.StartRedis(t).Client()
	store, err := tracking.New(rdb, tracking.Config{})
	if err != nil {
		t.Fatal(err)
	}
	counter := &writeCounter{Store: store, writes: map[tracking.PartitionKey]int{}}
	sink := testutil.StartSink(t)
	sink.Latency = func(*testutil.Delivery) time.Duration { return 30 * time.Millisecond }
	sub := newSub(topic, topic, sink.URL, subscription.OrderKey, 16)
	startNodeTracking(t, brokers, counter, staticSubs{sub}, nil)

	// The claim's and the first record's writes settle first.
	produceOne(t, brokers, topic)
	sink.WaitAcked(t, 1, 30*time.Second)
	time.Sleep(200 * time.Millisecond)
	before := counter.total()
	for i := range n {
		produceOne(t, brokers, topic)
		sink.WaitAcked(t, i+2, 30*time.Second)
		// The ack's write lands before the next record.
		time.Sleep(100 * time.Millisecond)
	}
	writes := counter.total() - before
	t.Logf("%d records sent one at a time: %d tracking writes", n, writes)
	// One each, and a few more for a lease renewal or a round that met
	// the answer halfway; two each without the hold.
	if writes > n*3/2 {
		t.Errorf("%d tracking writes for %d records sent alone, want about one each", writes, n)
	}
	testutil.WaitCommitted(t, testutil.Admin(t, brokers), sub.GroupID(), map[int32]int64{0: n + 1}, 30*time.Second)
}
