package faults

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
)

// Takeover without loss: two keyhook nodes as separate OS processes share a
// subscription; one is killed with SIGKILL mid-stream. The survivor takes
// its partitions over, skips what the dead node acked, and delivers the
// rest. Duplicates are bounded by what was in flight or not yet flushed at
// the kill.
func TestTakeoverAfterSIGKILLLosesNothing(t *testing.T) {
	const topic, partitions, n, keys = "takeover", 4, 20000, 400
	brokers := testutil.Kfake(t, partitions, topic)
	redisSrv := testutil.StartRedis(t)
	sink := testutil.StartSink(t)
	sink.Latency = func(*testutil.Delivery) time.Duration { return 10 * time.Millisecond }

	ends := produceKeyed(t, brokers, topic, n, keys)
	sub := &subscription.Subscription{
		Name: "takeover", Topics: []string{topic},
		Endpoint:    subscription.Endpoint{URL: sink.URL},
		MaxInFlight: 32,
	}
	sub.Normalize()
	subs, err := subscription.New(redisSrv.Client(), subscription.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := subs.Create(context.Background(), sub); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--kafka-brokers", brokers[0], "--redis-url", redisSrv.URL(), "--session-timeout", "6s", "--commit-interval", "200ms", "--shared-read=false"}
	a := testutil.StartKeyhook(t, "node-a", flags...)
	testutil.StartKeyhook(t, "node-b", flags...)

	sink.WaitAcked(t, n/4, time.Minute)
	killedAt := time.Now()
	inFlight := sink.InFlight()
	a.Signal(syscall.SIGKILL)
	// Acks the dead node received in its last flush interval (20ms) may not
	// have reached Redis; count generously what completed just before.
	unflushed := sink.CompletedSince(killedAt.Add(-100 * time.Millisecond))
	if !a.Wait(5 * time.Second) {
		t.Fatal("node-a did not die on SIGKILL")
	}

	sink.WaitAcked(t, n, 2*time.Minute)
	adm := kadm.NewClient(newClient(t, brokers))
	waitCommitted(t, adm, sub.GroupID(), topic, ends, time.Minute)

	dups := sink.Duplicates()
	bound := inFlight + unflushed
	t.Logf("takeover: %d records, killed node-a at %d acked; duplicates %d (bound %d = %d in flight + %d acked in the last 100ms before the kill)",
		n, n/4, dups, bound, inFlight, unflushed)
	if dups > bound {
		t.Errorf("%d duplicates after one SIGKILL, want <= %d", dups, bound)
	}
	for p, end := range ends {
		if m := sink.Missing(testutil.TP{Topic: topic, Partition: p}, end); len(m) > 0 {
			t.Errorf("partition %d: %d records lost, first %d", p, len(m), m[0])
		}
	}
	if v := sink.KeyOrderViolations(); len(v) > 0 {
		t.Errorf("%d per-key order violations, first: %s", len(v), v[0])
	}
}

// produceKeyed writes n records over keys keys (key-i), partitioned by key,
// and returns each partition's end offset.
func produceKeyed(t *testing.T, brokers []string, topic string, n, keys int) map[int32]int64 {
	t.Helper()
	cl := newClient(t, brokers, kgo.ProducerLinger(5*time.Millisecond))
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr error
	ends := make(map[int32]int64)
	for i := range n {
		wg.Add(1)
		rec := &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "key-%d", i%keys), Value: fmt.Appendf(nil, `{"seq":%d}`, i)}
		cl.Produce(context.Background(), rec, func(r *kgo.Record, err error) {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			ends[r.Partition] = max(ends[r.Partition], r.Offset+1)
		})
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("produce: %v", firstErr)
	}
	return ends
}

// waitCommitted waits until the group committed every partition's end.
func waitCommitted(t *testing.T, adm *kadm.Client, group, topic string, ends map[int32]int64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	got := map[int32]int64{}
	for time.Now().Before(deadline) {
		offs, err := adm.FetchOffsets(context.Background(), group)
		if err == nil {
			done := true
			for p, end := range ends {
				o, ok := offs.Lookup(topic, p)
				got[p] = o.At
				if !ok || o.At != end {
					done = false
				}
			}
			if done {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("commits did not reach the log end in %v: got %v, want %v", timeout, got, ends)
}
