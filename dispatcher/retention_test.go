package dispatcher_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/deadletter"
	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
)

// The retention guard: a key whose records fail (retried without end)
// holds its later records, which were produced long enough ago that the
// topic's retention (60 s here) is about to delete them. Before it does,
// they go out of their key's turn: dead-lettered with the reason when the
// subscription dead-letters (every record of the key: their retries end),
// delivered at once when dead-lettering is off (only the first fails
// there; the others get through). Other keys are untouched.
func TestRecordsAboutToFallOutOfRetentionLeaveTheirKeysTurn(t *testing.T) {
	for _, tc := range []struct {
		name       string
		deadLetter bool
	}{
		{"dead-lettered", true},
		{"delivered out of turn", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testutil.KafkaTiers(t, 1, nil, func(t *testing.T, brokers []string) {
				testRetentionGuard(t, brokers, tc.deadLetter)
			})
		})
	}
}

func testRetentionGuard(t *testing.T, brokers []string, deadLetter bool) {
	topic := testutil.UniqueTopic("retention")
	adm := testutil.Admin(t, brokers)
	ret := "60000"
	if _, err := adm.CreateTopic(context.Background(), 1, 1, map[string]*string{"retention.ms": &ret}, topic); err != nil {
		t.Fatal(err)
	}
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	sink.Status = func(d *testutil.Delivery) int {
		if d.Key == "held" && (deadLetter || d.Offset == 0) {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	}
	// Records written 50 s ago: within a minute's retention, but past
	// the guard's margin (a quarter of it) before their deletion.
	const n = 40
	old := time.Now().Add(-50 * time.Second)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var rs []*kgo.Record
	for i := range n {
		key := "held"
		if i%2 == 1 {
			key = fmt.Sprintf("k%d", i)
		}
		rs = append(rs, &kgo.Record{Topic: topic, Key: []byte(key), Value: fmt.Appendf(nil, "%d", i), Timestamp: old})
	}
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	sub := newSub(topic, topic, sink.URL, subscription.OrderKey, 8)
	sub.Retry = subscription.RetryPolicy{InitialIntervalMS: 50, MaxIntervalMS: 200, MaxAttempts: 1_000_000}
	dlq := ""
	if deadLetter {
		dlq = topic + ".dlq"
		sub.DeadLetterTopic = dlq
		testutil.CreateTopics(t, brokers, 1, dlq)
	}
	startNode(t, brokers, rdb, []*subscription.Subscription{sub}, func(c *dispatcher.Config) {
		c.ParkAfter = 2
	})

	if deadLetter {
		// All of "held" goes to the dead-letter topic, its first record
		// too (its retries end); the other keys are delivered.
		testutil.WaitCommitted(t, adm, sub.GroupID(), map[int32]int64{0: n}, 60*time.Second)
		letters := readAll(t, brokers, dlq, n/2)
		for _, l := range letters {
			if string(l.Key) != "held" || !strings.Contains(deadletter.Header(l, deadletter.HeaderError), "retention") {
				t.Errorf("dead letter of key %q with error %q; want key held, a retention reason", l.Key, deadletter.Header(l, deadletter.HeaderError))
			}
		}
		if got := sink.AckedCount(); got != n/2 {
			t.Errorf("%d records delivered, want %d (the other keys')", got, n/2)
		}
		return
	}
	// Without dead-lettering the first keeps failing, and holds the
	// commit; the rest of its key goes out of turn.
	sink.WaitAcked(t, n-1, 60*time.Second)
	for i := 2; i < n; i += 2 {
		if !sink.Acked(testutil.TP{Topic: topic, Partition: 0}, int64(i)) {
			t.Errorf("held/%d not delivered out of turn", i)
		}
	}
}

// readAll reads want records from topic's partition 0, from the start.
func readAll(t *testing.T, brokers []string, topic string, want int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < want && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	if len(out) != want {
		t.Fatalf("read %d records from %s, want %d", len(out), topic, want)
	}
	return out
}
