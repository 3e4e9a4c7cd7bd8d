package dispatcher_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/keyhook/keyhook/deadletter"
	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
)

// Two subscriptions dead-lettering into each other's source topic, both
// endpoints answering 400 for good: each record is dead-lettered once by
// each and then acked as a dead_letter_loop (logged at error, counted),
// instead of bouncing between the topics until Kafka refuses its headers.
func TestDeadLetterLoopBetweenTwoSubscriptionsIsBounded(t *testing.T) {
	testutil.KafkaTiers(t, 1, []string{"ping", "pong"}, func(t *testing.T, brokers []string) {
		ping, pong, suffix := "ping", "pong", ""
		if !strings.HasSuffix(t.Name(), "/kfake") {
			// A shared broker keeps topics and groups from earlier runs.
			suffix = testutil.UniqueTopic("")
			ping, pong = "ping"+suffix, "pong"+suffix
			testutil.CreateTopics(t, brokers, 1, ping, pong)
		}
		testDeadLetterLoop(t, brokers, ping, pong, suffix)
	})
}

func testDeadLetterLoop(t *testing.T, brokers []string, pingTopic, pongTopic, suffix string) {
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	sink.Status = func(*testutil.Delivery) int { return http.StatusBadRequest }
	const n = 3
	produce(t, brokers, pingTopic, n, func(int) string { return "k" }, func(int) int32 { return 0 })
	a := newSub("a"+suffix, pingTopic, sink.URL, subscription.OrderKey, 4)
	a.DeadLetterTopic = pongTopic
	b := newSub("b"+suffix, pongTopic, sink.URL, subscription.OrderKey, 4)
	b.DeadLetterTopic = pingTopic
	reader := sdkmetric.NewManualReader()
	var logs syncBuffer
	startNode(t, brokers, rdb, []*subscription.Subscription{a, b}, func(c *dispatcher.Config) {
		c.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		c.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})

	// a dead-letters ping/0..2 into pong/0..2, b those into ping/3..5, and
	// a acks ping/3..5 without writing: 2n writes, then quiet.
	adm := testutil.Admin(t, brokers)
	testutil.WaitCommitted(t, adm, a.GroupID(), map[int32]int64{0: 2 * n}, 30*time.Second)
	testutil.WaitCommitted(t, adm, b.GroupID(), map[int32]int64{0: n}, 30*time.Second)
	time.Sleep(time.Second) // a write beyond the bound would show now
	ends, err := adm.ListEndOffsets(context.Background(), pingTopic, pongTopic)
	if err != nil {
		t.Fatal(err)
	}
	ping, _ := ends.Lookup(pingTopic, 0)
	pong, _ := ends.Lookup(pongTopic, 0)
	if ping.Offset != 2*n || pong.Offset != n {
		t.Errorf("ping ends at %d, pong at %d; want %d and %d (%d dead-letter writes, want %d)",
			ping.Offset, pong.Offset, 2*n, n, ping.Offset+pong.Offset-n, 2*n)
	}

	// The last hop carries one block of keyhook headers and the path.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{pingTopic: {0: kgo.NewOffset().At(n)}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var last *kgo.Record
	for last == nil && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			if last == nil {
				last = r
			}
		})
	}
	if last == nil {
		t.Fatalf("no dead letter read back from %s", pingTopic)
	}
	count := map[string]int{}
	for _, h := range last.Headers {
		count[h.Key]++
	}
	if count[deadletter.HeaderSubscription] != 1 || count[deadletter.HeaderPath] != 1 || deadletter.Header(last, deadletter.HeaderPath) != a.ID+","+b.ID {
		t.Errorf("second-hop dead letter headers %v, path %q; want one block, path %s,%s", count, deadletter.Header(last, deadletter.HeaderPath), a.ID, b.ID)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	sums := counterSums(rm)
	if got := sums["keyhook.deliveries{keyhook.outcome=dead_letter_loop}"]; got != n {
		t.Errorf("dead_letter_loop outcomes = %d, want %d (all: %v)", got, n, sums)
	}
	if got := sums["keyhook.dead_letters{}"]; got != 2*n {
		t.Errorf("dead letters written = %d, want %d", got, 2*n)
	}
	if lines := strings.Count(logs.String(), `"level":"ERROR","msg":"record not dead-lettered again`); lines != n {
		t.Errorf("%d error lines for a refused loop, want %d:\n%s", lines, n, logs.String())
	}
}
