package dispatcher_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
)

// A node cut from Kafka but not from Redis goes on renewing its claims in
// the tracker; it must still stop starting deliveries, first attempts and
// retries, before the group can give its partitions away: the coordinator
// has answered none of its requests for the session timeout less a
// heartbeat. Within that, deliveries go on; once Kafka answers again,
// nothing is lost.
func TestNoDeliveryStartsOnceTheCoordinatorStopsAnswering(t *testing.T) {
	const topic, partitions = "kafka-cut", 2
	brokers := testutil.Kfake(t, partitions, topic)
	// Every connection of the node, and only of the node, goes through
	// the proxy.
	proxy := testutil.StartProxy(t, "127.0.0.1:0", brokers[0])
	srv := testutil.StartRedis(t)
	sink := testutil.StartSink(t)
	// One key fails until the end, so a retry waits at every moment.
	var failing atomic.Bool
	failing.Store(true)
	sink.Status = func(d *testutil.Delivery) int {
		if d.Key == "k3" && failing.Load() {
			return 503
		}
		return 200
	}
	reader := sdkmetric.NewManualReader()
	sub := newSub("kafka-cut", topic, sink.URL, subscription.OrderKey, 16)
	startNode(t, brokers, srv.Client(), []*subscription.Subscription{sub}, func(c *dispatcher.Config) {
		c.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		c.KafkaOptions = append(c.KafkaOptions, kgo.Dialer(func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, proxy.Addr())
		}))
	})
	unconfirmed := func() int64 { return testutil.Int64Metric(t, reader, "keyhook.partitions.unconfirmed") }
	adm := testutil.Admin(t, brokers)
	stop := produceSteadily(t, brokers, topic, partitions, 200)
	sink.WaitAcked(t, 100, 20*time.Second)

	proxy.Hang()
	cutAt := time.Now()
	// The last request the coordinator answered was written before the
	// cut, so no delivery starts past cutAt+testLease; what passed the
	// pool's check just before may reach the sink a moment later, later
	// still on a loaded machine under -race (as in the lease's test).
	const slack = 300 * time.Millisecond
	time.Sleep(testLease + 2*time.Second)
	within, retriesWithin, after := startsAround(sink, cutAt, time.Second, testLease-testSession/5-slack, testLease+slack)
	stuck := unconfirmed()
	proxy.Pass()
	failing.Store(false)
	t.Logf("requests started while Kafka hung: %d (%d retries) from 1 s to a heartbeat before the lease's end, %d after it; %d partitions unconfirmed", within, retriesWithin, len(after), stuck)
	if within == 0 || retriesWithin == 0 {
		t.Errorf("%d requests (%d retries) started within the lease while Kafka hung; want deliveries and retries to go on", within, retriesWithin)
	}
	if len(after) > 0 {
		t.Errorf("%d requests started after the coordinator's last answer was a lease old; first: %v", len(after), after[:min(len(after), 5)])
	}
	if stuck != partitions {
		t.Errorf("%d partitions unconfirmed with Kafka cut for longer than the lease; want %d", stuck, partitions)
	}

	ends := stop()
	testutil.WaitCommitted(t, adm, sub.GroupID(), ends, 60*time.Second)
	checkDelivered(t, sink, topic, ends)
}
