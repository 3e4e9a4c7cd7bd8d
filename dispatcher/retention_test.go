package dispatcher_test

import (
	"context"
	"fmt"
	"log/slog"
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
		c.ParkAfter = new(2)
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
		var offs []string
		for _, r := range out {
			offs = append(offs, deadletter.Header(r, deadletter.HeaderOffset)+"@"+deadletter.Header(r, deadletter.HeaderAttempts))
		}
		t.Fatalf("read %d records from %s, want %d: source offsets@attempts %v", len(out), topic, want, offs)
	}
	return out
}

// The retention guard against a real broker deleting segments (retention
// 20 s, a segment a second, checked every second): one key fails without
// end while records keep coming, its later ones parked. Before the broker
// deletes any of them, the guard dead-letters them; the log start then
// passes them, and still every record is delivered or dead-lettered with
// its value: none was lost to retention.
func TestRetentionGuardDeadLettersBeforeTheBrokerDeletes(t *testing.T) {
	k := testutil.StartKafka(t)
	brokers := k.Brokers
	topic, dlq := "guarded", "guarded.dlq"
	adm := testutil.Admin(t, brokers)
	ret, seg := "20000", "1000"
	if _, err := adm.CreateTopic(context.Background(), 1, 1, map[string]*string{"retention.ms": &ret, "segment.ms": &seg}, topic); err != nil {
		t.Fatal(err)
	}
	testutil.CreateTopics(t, brokers, 1, dlq)
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	sink.Status = func(d *testutil.Delivery) int {
		if d.Key == "held" {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	}
	sub := newSub("guarded", topic, sink.URL, subscription.OrderKey, 8)
	sub.Retry = subscription.RetryPolicy{InitialIntervalMS: 50, MaxIntervalMS: 500, MaxAttempts: 1_000_000}
	sub.DeadLetterTopic = dlq
	var logs syncBuffer
	startNode(t, brokers, rdb, []*subscription.Subscription{sub}, func(c *dispatcher.Config) {
		c.ParkAfter = new(2)
		c.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})

	// 30 s of records, every tenth of key "held", the rest of 50 keys.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produced := 0
	for start := time.Now(); time.Since(start) < 30*time.Second; produced++ {
		key := fmt.Sprintf("k%d", produced%50)
		if produced%10 == 0 {
			key = "held"
		}
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Key: []byte(key), Value: fmt.Appendf(nil, "%d", produced)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The broker deletes the first segments: the log start passes records
	// of "held" that no endpoint ever took.
	var logStart int64
	testutil.WaitFor(t, 60*time.Second, "the broker deletes the oldest segments", func() bool {
		starts, err := adm.ListStartOffsets(context.Background(), topic)
		if err != nil {
			return false
		}
		o, _ := starts.Lookup(topic, 0)
		logStart = o.Offset
		return logStart > 100
	})
	held := (produced + 9) / 10 // offsets 0, 10, 20… below produced
	done := func() bool { return sink.AckedCount() >= produced-held && countRecords(t, brokers, dlq) >= int64(held) }
	for deadline := time.Now().Add(60 * time.Second); !done(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d delivered, %d of %d dead-lettered; log:\n%s", sink.AckedCount(), produced-held, countRecords(t, brokers, dlq), held, logs.String())
		}
	}
	letters := readAll(t, brokers, dlq, held)
	seen := map[string]bool{}
	for _, l := range letters {
		if !strings.Contains(deadletter.Header(l, deadletter.HeaderError), "retention") {
			t.Errorf("dead letter %s without the retention reason: %q", l.Value, deadletter.Header(l, deadletter.HeaderError))
		}
		seen[string(l.Value)] = true
	}
	for i := 0; i < produced; i += 10 {
		if !seen[fmt.Sprint(i)] {
			t.Errorf("held record %d neither delivered nor dead-lettered", i)
		}
	}
	if strings.Contains(logs.String(), "they are lost") {
		t.Errorf("records reported lost to retention:\n%s", logs.String())
	}
	t.Logf("%d records, %d of the held key dead-lettered before deletion; log start now %d", produced, held, logStart)
}

// countRecords returns how many records topic's partition 0 holds.
func countRecords(t *testing.T, brokers []string, topic string) int64 {
	t.Helper()
	ends, err := testutil.Admin(t, brokers).ListEndOffsets(context.Background(), topic)
	if err != nil {
		return 0
	}
	o, _ := ends.Lookup(topic, 0)
	return o.Offset
}
