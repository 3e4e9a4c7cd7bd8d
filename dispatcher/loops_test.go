package dispatcher_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
)

// requestCounter counts the Kafka requests a node's clients send, by key.
type requestCounter struct {
	mu sync.Mutex
	n  map[int16]int
}

func (c *requestCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, _ error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[key]++
}

func (c *requestCounter) count(key int16) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

// Many subscriptions on one topic cost one read of its retention, not one
// each: the node reads a topic's config once per pass, and a subscription
// that joins later gets what was read.
func TestTheTopicsRetentionIsReadOncePerTopicNotPerSubscription(t *testing.T) {
	topic := testutil.UniqueTopic("topics-once")
	brokers := testutil.Kfake(t, 2, topic)
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	requests := &requestCounter{n: make(map[int16]int)}
	var subs []*subscription.Subscription
	const n = 12
	for i := range n {
		subs = append(subs, newSub(fmt.Sprintf("once%d-%s", i, topic), topic, sink.URL, subscription.OrderKey, 4))
	}
	reader := sdkmetric.NewManualReader()
	h := startNode(t, brokers, rdb, subs, func(c *dispatcher.Config) {
		c.KafkaOptions = append(c.KafkaOptions, kgo.WithHooks(requests))
		c.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	})
	defer h.stop(t)
	claimedOwned(t, h, 2*n)
	describe := (&kmsg.DescribeConfigsRequest{}).Key()
	testutil.WaitFor(t, 10*time.Second, "the topic's retention read", func() bool { return requests.count(describe) > 0 })
	time.Sleep(500 * time.Millisecond) // any read per subscription would come now
	if got := requests.count(describe); got > 2 {
		t.Fatalf("%d reads of the topic's config for %d subscriptions on it; want 1 (2 if one failed)", got, n)
	}
	// Each subscription learned its topic's partition count all the same.
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	totals := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if g, ok := m.Data.(metricdata.Gauge[int64]); ok && m.Name == "keyhook.partitions.total" {
				for _, dp := range g.DataPoints {
					id, _ := dp.Attributes.Value("keyhook.subscription")
					totals[id.AsString()] = dp.Value
				}
			}
		}
	}
	for _, s := range subs {
		if totals[s.ID] != 2 {
			t.Errorf("keyhook.partitions.total of %s = %d, want 2 (all: %v)", s.ID, totals[s.ID], totals)
		}
	}
}

// Each subscription's group commits on its own, so without a bound a
// node's commits grow with its subscriptions, not with its records.
// CommitRate bounds them over the node: 16 subscriptions whose watermarks
// move all the time, at a commit interval of 50 ms, would commit 320
// times a second; at CommitRate 16 each commits about once a second, and
// every one of them still commits.
func TestANodeCommitsAtMostCommitRateTimesASecondOverItsSubscriptions(t *testing.T) {
	topic := testutil.UniqueTopic("commit-rate")
	cluster := testutil.KfakeCluster(t, 2, topic)
	brokers := cluster.ListenAddrs()
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	const n, rate = 16, 16
	var subs []*subscription.Subscription
	cursor := make(map[string]bool)
	for i := range n {
		s := newSub(fmt.Sprintf("rate%d-%s", i, topic), topic, sink.URL, subscription.OrderKey, 4)
		subs = append(subs, s)
		cursor[s.GroupID()] = true
	}
	var mu sync.Mutex
	commits := make(map[string]int)
	cluster.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if g := req.(*kmsg.OffsetCommitRequest).Group; cursor[g] {
			mu.Lock()
			commits[g]++
			mu.Unlock()
		}
		return nil, nil, false
	})
	metrics := sdkmetric.NewManualReader()
	h := startNode(t, brokers, rdb, subs, func(c *dispatcher.Config) {
		c.SharedRead = true
		c.CommitInterval = 50 * time.Millisecond
		c.CommitRate = rate
		c.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(metrics))
	})
	defer h.stop(t)
	claimedOwned(t, h, 2*n)

	// A record on each partition every 20 ms keeps every watermark moving.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, stopProducing := context.WithCancel(context.Background())
	var producing sync.WaitGroup
	producing.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			for p := range int32(2) {
				cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: p, Key: fmt.Appendf(nil, "k%d", i%10), Value: []byte("v")}, nil)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	defer func() { stopProducing(); producing.Wait() }()
	time.Sleep(time.Second)
	mu.Lock()
	clear(commits)
	start := time.Now()
	mu.Unlock()
	time.Sleep(4 * time.Second)
	mu.Lock()
	took := time.Since(start)
	counted := maps.Clone(commits)
	mu.Unlock()

	total := 0
	for _, c := range counted {
		total += c
	}
	if most := int(1.5*rate*took.Seconds()) + n; total > most {
		t.Errorf("%d commits of %d subscriptions in %v: more than %d (CommitRate %d a second); by group: %v", total, n, took.Round(time.Millisecond), most, rate, counted)
	}
	for _, s := range subs {
		if c := counted[s.GroupID()]; c < 2 {
			t.Errorf("%s committed %d times in %v, want every subscription to commit about once a second (by group: %v)", s.ID, c, took.Round(time.Millisecond), counted)
		}
	}
	if every := testutil.Float64Metric(t, metrics, "keyhook.commit.interval"); every != 1 {
		t.Errorf("keyhook.commit.interval = %vs, want 1s (%d subscriptions at CommitRate %d)", every, n, rate)
	}
	t.Logf("%d commits of %d subscriptions in %v", total, n, took.Round(time.Millisecond))
}
