package dispatcher

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
	"github.com/keyhook/keyhook/webhooks"
)

// fixedSubs feeds a node one subscription set.
type fixedSubs []*subscription.Subscription

func (s fixedSubs) Watch(ctx context.Context, _ time.Duration, fn func([]*subscription.Subscription)) error {
	fn(s)
	<-ctx.Done()
	return nil
}

// An owned partition with nothing to do sleeps, without a goroutine: its
// loop runs for what comes due (the retention guard), not at every flush
// interval, nor for its lease, which the node's renewer keeps. With a node
// of 400 idle subscriptions, the loops' ticks were most of its idle CPU,
// and with 1,000 their goroutines most of its goroutines. The lease still
// holds: the partitions stay claimed and owned throughout.
func TestAnIdlePartitionsLoopSleepsUntilSomethingIsDue(t *testing.T) {
	const topic, partitions, records = "idle", 2, 20
	brokers := testutil.Kfake(t, partitions, topic)
	srv := testutil.StartRedis(t)
	sink := testutil.StartSink(t)
	tracker, err := tracking.New(srv.Client(), tracking.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sender, err := webhooks.NewClient(webhooks.ClientConfig{Policy: webhooks.AddressPolicy{AllowPrivate: true}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	sub := &subscription.Subscription{ID: "idle", Name: "idle", Topics: []string{topic}, Endpoint: subscription.Endpoint{URL: sink.URL},
		Ordering: subscription.OrderKey, MaxInFlight: 16, Version: 1, DeadLetterTopic: subscription.DeadLetterNone}
	sub.Normalize()
	n, err := New(Config{NodeID: "idle-node", Brokers: brokers,
		Tuning: Tuning{CommitInterval: 100 * time.Millisecond, SessionTimeout: 6 * time.Second},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, fixedSubs{sub}, sender, tracker)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("node stopped with error: %v", err)
		}
	})

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	for i := range records {
		r := &kgo.Record{Topic: topic, Partition: int32(i % partitions), Key: fmt.Appendf(nil, "k%d", i%5), Value: []byte("v")}
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cl.Close()
	sink.WaitAcked(t, records, 30*time.Second)
	workers := func() []*worker {
		var ws []*worker
		for _, g := range n.groups() {
			ws = append(ws, g.snapshotWorkers()...)
		}
		return ws
	}
	testutil.WaitFor(t, 30*time.Second, "every partition committed to its end", func() bool {
		ws := workers()
		if len(ws) != partitions {
			return false
		}
		for _, w := range ws {
			if w.committed.Load() != records/partitions {
				return false
			}
		}
		return true
	})

	// Reading the count is a turn of the loop too.
	turns := func(w *worker) (n uint64) {
		w.do(func() { n = w.turnCount })
		return n
	}
	// Longer than a lease (the session less a heartbeat interval): the
	// partitions stay owned only if something renews their leases.
	const window, most = 7 * time.Second, 15
	ws := workers()
	before := make([]uint64, len(ws))
	for i, w := range ws {
		before[i] = turns(w)
	}
	time.Sleep(window)
	testutil.WaitFor(t, 2*time.Second, "every idle partition's loop asleep without a goroutine", func() bool {
		for _, w := range ws {
			if !w.loop.asleep() {
				return false
			}
		}
		return true
	})
	for i, w := range ws {
		ran := turns(w) - before[i] - 1
		t.Logf("partition %d: the loop ran %d times in %v of idleness (%.1f/s)", w.tp.partition, ran, window, float64(ran)/window.Seconds())
		if ran > most {
			t.Errorf("partition %d: an idle partition's loop ran %d times in %v, want at most %d", w.tp.partition, ran, window, most)
		}
		if !w.owned() {
			t.Errorf("partition %d: not owned after %v of idleness; the lease was not renewed", w.tp.partition, window)
		}
	}
}
