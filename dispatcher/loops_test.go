package dispatcher_test

import (
	"context"
	"fmt"
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
