package conformance

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/app"
	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/internal/verify"
	"github.com/keyhook/keyhook/subscription"
)

// The size of every delivery cell.
const (
	cellPartitions = 4
	cellRecords    = 2000
	cellKeys       = 50
	// produceRate paces the producer so that records arrive for about
	// four seconds: long enough to span a rebalance on a real broker.
	produceRate = 500
	// failEvery makes the first attempt at every failEvery-th offset of a
	// partition answer 503, so retries are part of every cell.
	failEvery = 37
	// settleTimeout bounds the wait until every commit reached its log end.
	settleTimeout = 90 * time.Second
)

// kafkaTiers are the Kafkas every delivery cell runs on.
var kafkaTiers = []struct {
	name    string
	brokers func(t *testing.T) []string
}{
	{"kfake", func(t *testing.T) []string { return testutil.Kfake(t, cellPartitions) }},
	{"kafka", func(t *testing.T) []string { return testutil.RealKafka(t) }},
}

var orderings = []subscription.Ordering{subscription.OrderKey, subscription.OrderPartition, subscription.OrderNone}

var batchings = []struct {
	name  string
	batch subscription.Batch
}{
	{"off", subscription.Batch{}},
	{"on", subscription.Batch{MaxRecords: 20, MaxWaitMS: 5}},
}

// TestDeliveryGuarantees runs every ordering, batched and not, on kfake
// and the real broker: records produced while a node delivers, a second
// node joining half-way and the first leaving gracefully, the endpoint
// failing some first attempts. The verifier then holds the node to
// at-least-once, per-key order (key and partition orderings), commits
// that never moved backwards nor passed an unacked offset and reached the
// log end, and no duplicate: nothing failed but the endpoint, and a
// graceful handover must not redeliver.
func TestDeliveryGuarantees(t *testing.T) {
	for _, tier := range kafkaTiers {
		t.Run(tier.name, func(t *testing.T) {
			brokers := tier.brokers(t)
			for _, ordering := range orderings {
				for _, b := range batchings {
					t.Run(fmt.Sprintf("ordering=%s/batching=%s", ordering, b.name), func(t *testing.T) {
						runCell(t, brokers, ordering, b.batch)
					})
				}
			}
		})
	}
}

func runCell(t *testing.T, brokers []string, ordering subscription.Ordering, batch subscription.Batch) {
	started := time.Now()
	topic := fmt.Sprintf("conformance-%s-%d", ordering, time.Now().UnixNano())
	testutil.CreateTopics(t, brokers, cellPartitions, topic)
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	sink.Status = failFirstAttempts()

	sub := &subscription.Subscription{
		Name: "conformance", Topics: []string{topic},
		Endpoint: subscription.Endpoint{URL: sink.URL},
		Ordering: ordering, MaxInFlight: 32, Batch: batch,
		Start:           subscription.StartEarliest,
		DeadLetterTopic: subscription.DeadLetterNone,
		Retry:           subscription.RetryPolicy{InitialIntervalMS: 10, MaxIntervalMS: 100},
	}
	store, err := subscription.New(rdb, subscription.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Create(context.Background(), sub); err != nil {
		t.Fatalf("create subscription: %v", err)
	}
	adm := kadm.NewClient(newClient(t, brokers))
	subject := verify.Subject{
		Brokers: brokers, Adm: adm, Topic: topic, Partitions: cellPartitions,
		Group: sub.GroupID(), Sink: sink,
		Sampler:  verify.NewCommitSampler(adm, sub.GroupID(), topic, cellPartitions),
		KeyOrder: ordering != subscription.OrderNone,
		Expected: make(map[int64]bool),
	}
	sctx, stopSampler := context.WithCancel(context.Background())
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		subject.Sampler.Run(sctx)
	}()
	defer func() {
		stopSampler()
		<-sampled
	}()

	first := startNode(t, "node-a", brokers, rdb)
	for seq := range int64(cellRecords) {
		subject.Expected[seq] = true
	}
	produced := produce(t, brokers, topic)

	// A second node joins while records flow, then the first leaves: two
	// graceful handovers with deliveries in flight.
	sink.WaitAcked(t, cellRecords/4, 60*time.Second)
	second := startNode(t, "node-b", brokers, rdb)
	testutil.WaitFor(t, 60*time.Second, "node-b owns a partition", func() bool { return len(second.Node().Owned()) > 0 })
	atHandover := sink.AckedCount()
	first.stop(t)
	if err := <-produced; err != nil {
		t.Fatalf("produce: %v", err)
	}

	ends, _, err := subject.WaitSettled(settleTimeout)
	if err != nil {
		t.Error(err)
	}
	stopSampler()
	<-sampled
	o := subject.Check(t, ends)
	polls, _, commits := subject.Sampler.Stats()
	deliveries := sink.Deliveries()
	batched := 0
	for _, d := range deliveries {
		if d.Batch != "" {
			batched++
		}
	}
	t.Logf("cell records=%d lost=%d duplicates=%d (bound %d) max_commit_overshoot=%d commits_observed=%d (%d polls) deliveries=%d batched=%d acked_when_node-a_left=%d wall=%.1fs",
		o.Records, o.Lost, o.Duplicates, o.Bound, o.Overshoot, commits, polls, len(deliveries), batched, atHandover, time.Since(started).Seconds())
	if o.Records != cellRecords {
		t.Errorf("%d records in the log, want %d", o.Records, cellRecords)
	}
	if on := batch.MaxRecords > 1; on != (batched > 0) {
		t.Errorf("%d of %d deliveries came in batches with batching %v", batched, len(deliveries), on)
	}
}

// produce writes the cell's records, verify.Record(seq, cellKeys) for
// seq in [0, cellRecords), at produceRate records per second, so that
// records still arrive while nodes join and leave. The channel receives
// the first error, or nil once the broker acknowledged every record.
func produce(t *testing.T, brokers []string, topic string) <-chan error {
	cl := newClient(t, brokers, kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(5*time.Millisecond))
	done := make(chan error, 1)
	go func() {
		const tick = 20 * time.Millisecond
		perTick := int64(produceRate * tick / time.Second)
		next := time.Now()
		var seq int64
		for seq < cellRecords {
			var batch []*kgo.Record
			for ; seq < cellRecords && int64(len(batch)) < perTick; seq++ {
				batch = append(batch, verify.Record(seq, cellKeys))
			}
			if err := cl.ProduceSync(context.Background(), batch...).FirstErr(); err != nil {
				done <- err
				return
			}
			next = next.Add(tick)
			time.Sleep(time.Until(next))
		}
		done <- nil
	}()
	return done
}

// failFirstAttempts answers 503 to the first request for every
// failEvery-th offset of each partition, 200 otherwise.
func failFirstAttempts() func(*testutil.Delivery) int {
	var mu sync.Mutex
	failed := make(map[testutil.TP]map[int64]bool)
	return func(d *testutil.Delivery) int {
		if d.Offset%failEvery != 0 {
			return http.StatusOK
		}
		mu.Lock()
		defer mu.Unlock()
		tp := testutil.TP{Topic: d.Topic, Partition: d.Partition}
		if failed[tp] == nil {
			failed[tp] = make(map[int64]bool)
		}
		if failed[tp][d.Offset] {
			return http.StatusOK
		}
		failed[tp][d.Offset] = true
		return http.StatusServiceUnavailable
	}
}

// node is a running node built by app.Build.
type node struct {
	*app.App
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// startNode builds a dispatcher node as keyhook serve --roles dispatcher
// does and runs it until stop or the end of the test.
func startNode(t *testing.T, id string, brokers []string, rdb redis.UniversalClient) *node {
	t.Helper()
	a, err := app.Build(context.Background(), app.Config{
		NodeID: id, Brokers: brokers, Roles: app.RoleDispatcher,
		AllowPrivateEndpoints: true,
		Tuning: dispatcher.Tuning{
			RequestTimeout: 10 * time.Second, CommitInterval: 50 * time.Millisecond, SessionTimeout: 6 * time.Second,
			DrainTimeout: 10 * time.Second, ResyncInterval: 100 * time.Millisecond,
		},
		ConfigTopic: configTopic(t),
		Logger:      logger().With("node", id),
	}, app.Deps{Redis: rdb})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &node{App: a, cancel: cancel, done: make(chan error, 1)}
	go func() { n.done <- a.Run(ctx) }()
	t.Cleanup(func() { n.stop(t) })
	return n
}

// runStamp keeps the config topics of one run apart from an earlier run's.
var runStamp = time.Now().UnixNano()

// configTopic is the config topic of a test's nodes: the test's own, so
// that nodes of other tests (or runs) on a shared broker never restore
// its subscriptions into their Redis, nor it theirs.
func configTopic(t *testing.T) string {
	name := strings.Map(func(r rune) rune {
		if 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '.' {
			return r
		}
		return '_'
	}, t.Name())
	return fmt.Sprintf("conformance-%d-%s", runStamp, name)
}

func (n *node) stop(t *testing.T) {
	t.Helper()
	n.once.Do(func() {
		n.cancel()
		select {
		case err := <-n.done:
			if err != nil {
				t.Errorf("%s stopped with %v", n.NodeID(), err)
			}
		case <-time.After(60 * time.Second):
			t.Errorf("%s did not stop within 60s", n.NodeID())
		}
	})
}

func newClient(t *testing.T, brokers []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// logger keeps the nodes quiet unless KEYHOOK_LOG_LEVEL asks otherwise.
func logger() *slog.Logger {
	var level slog.Level = slog.LevelError
	if v := os.Getenv("KEYHOOK_LOG_LEVEL"); v != "" {
		_ = level.UnmarshalText([]byte(v))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}
