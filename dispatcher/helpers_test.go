package dispatcher_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
	"github.com/keyhook/keyhook/webhooks"
)

// staticSubs feeds a node a fixed subscription set.
type staticSubs []*subscription.Subscription

func (s staticSubs) Watch(ctx context.Context, _ time.Duration, fn func([]*subscription.Subscription)) error {
	fn(s)
	<-ctx.Done()
	return nil
}

func newSub(id, topic, url string, ordering subscription.Ordering, maxInFlight int) *subscription.Subscription {
	s := &subscription.Subscription{
		ID: id, Name: id, Topics: []string{topic},
		Endpoint: subscription.Endpoint{URL: url},
		Ordering: ordering, MaxInFlight: maxInFlight, Version: 1,
		DeadLetterTopic: subscription.DeadLetterNone,
	}
	s.Normalize()
	return s
}

type nodeHandle struct {
	node   *dispatcher.Node
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// stop shuts the node down gracefully and waits for it.
func (h *nodeHandle) stop(t *testing.T) {
	h.once.Do(func() {
		h.cancel()
		select {
		case err := <-h.done:
			if err != nil {
				t.Errorf("node stopped with error: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Errorf("node did not stop within 60s")
		}
	})
}

func startNode(t *testing.T, brokers []string, rdb redis.UniversalClient, subs []*subscription.Subscription, mod func(*dispatcher.Config)) *nodeHandle {
	t.Helper()
	return startNodeWith(t, brokers, rdb, staticSubs(subs), mod)
}

func startNodeWith(t *testing.T, brokers []string, rdb redis.UniversalClient, subs dispatcher.Subscriptions, mod func(*dispatcher.Config)) *nodeHandle {
	t.Helper()
	tracker, err := tracking.New(rdb, tracking.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return startNodeTracking(t, brokers, tracker, subs, mod)
}

// testSession is the session timeout of the nodes startNode starts, and
// testLease their ownership lease: the session less one heartbeat (a
// fifth of it).
const (
	testSession = 6 * time.Second
	testLease   = testSession - testSession/5
)

// startNodeTracking starts a node over a tracker the test configured.
func startNodeTracking(t *testing.T, brokers []string, tracker dispatcher.Tracker, subs dispatcher.Subscriptions, mod func(*dispatcher.Config)) *nodeHandle {
	t.Helper()
	return startNodeSending(t, brokers, tracker, subs, mod, nil)
}

// startNodeSending starts a node sending through sender, or through a
// client of its own when nil.
func startNodeSending(t *testing.T, brokers []string, tracker dispatcher.Tracker, subs dispatcher.Subscriptions, mod func(*dispatcher.Config), sender dispatcher.Sender) *nodeHandle {
	t.Helper()
	cfg := dispatcher.Config{
		NodeID:  fmt.Sprintf("node-%d", time.Now().UnixNano()),
		Brokers: brokers,
		Tuning: dispatcher.Tuning{
			CommitInterval: 100 * time.Millisecond,
			SessionTimeout: testSession,
			Retry:          webhooks.RetryPolicy{InitialInterval: 20 * time.Millisecond, MaxInterval: 200 * time.Millisecond},
		},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if mod != nil {
		mod(&cfg)
	}
	if sender == nil {
		c, err := webhooks.NewClient(webhooks.ClientConfig{Policy: webhooks.AddressPolicy{AllowPrivate: true}, Timeout: 10 * time.Second,
			TracerProvider: cfg.TracerProvider})
		if err != nil {
			t.Fatal(err)
		}
		sender = c
	}
	n, err := dispatcher.New(cfg, subs, sender, tracker)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &nodeHandle{node: n, cancel: cancel, done: make(chan error, 1)}
	go func() { h.done <- n.Run(ctx) }()
	t.Cleanup(func() { h.stop(t) })
	return h
}

// produce writes n records to topic; keyOf names the key of record i and
// partOf its partition. It returns the end offset of every partition.
func produce(t *testing.T, brokers []string, topic string, n int, keyOf func(i int) string, partOf func(i int) int32) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends := make(map[int32]int64)
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr error
	for i := range n {
		rec := &kgo.Record{Topic: topic, Partition: partOf(i), Value: fmt.Appendf(nil, "record-%d", i)}
		if k := keyOf(i); k != "" {
			rec.Key = []byte(k)
		}
		wg.Add(1)
		cl.Produce(context.Background(), rec, func(r *kgo.Record, err error) {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			if r.Offset+1 > ends[r.Partition] {
				ends[r.Partition] = r.Offset + 1
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("produce: %v", firstErr)
	}
	return ends
}

// feed is a subscription source the test changes at will.
type feed chan []*subscription.Subscription

func (f feed) Watch(ctx context.Context, _ time.Duration, fn func([]*subscription.Subscription)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case s := <-f:
			fn(s)
		}
	}
}

// checkDelivered fails t for every partition of topic with a record below
// its end in ends that the sink never answered 2xx.
func checkDelivered(t *testing.T, sink *testutil.Sink, topic string, ends map[int32]int64) {
	t.Helper()
	for p, end := range ends {
		if m := sink.Missing(testutil.TP{Topic: topic, Partition: p}, end); len(m) > 0 {
			t.Errorf("partition %d: %d records never delivered, first %d", p, len(m), m[0])
		}
	}
}

// startsAround sorts the requests the sink saw by when they started after
// t0: within counts those that started between from and to (retries
// counts the later attempts among them), late names those that started
// after late.
func startsAround(sink *testutil.Sink, t0 time.Time, from, to, late time.Duration) (within, retries int, after []string) {
	for _, d := range sink.Deliveries() {
		switch at := d.Start.Sub(t0); {
		case at > from && at < to:
			within++
			if d.Attempt > 1 {
				retries++
			}
		case at > late:
			after = append(after, fmt.Sprintf("%d@%d attempt %d at +%v", d.Partition, d.Offset, d.Attempt, at.Round(time.Millisecond)))
		}
	}
	return within, retries, after
}

// checkOwnedMatchesStats fails unless Owned lists what Stats shows, in
// its order: Owned reads the workers directly for the heartbeat, and the
// two must not drift apart. The two are read one after the other, so a
// node still settling gets a few tries.
func checkOwnedMatchesStats(t *testing.T, n *dispatcher.Node) {
	t.Helper()
	var got, want []dispatcher.Ownership
	for range 50 {
		want = want[:0]
		for _, g := range n.Stats() {
			for _, p := range g.Partitions {
				o := dispatcher.Ownership{Subscription: g.Subscription, Topic: p.Topic, Partition: p.Partition, Claimed: p.Claimed,
					Reader: g.Reader, CatchingUp: p.Detached}
				if p.Ranges != nil && !p.Ranges.IsFull() {
					o.Ranges = p.Ranges.String()
				}
				want = append(want, o)
			}
		}
		if got = n.Owned(); len(want) > 0 && slices.Equal(got, want) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("Owned lists %v, Stats shows %v", got, want)
}
