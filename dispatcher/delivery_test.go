package dispatcher_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/deadletter"
	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
)

// A record the endpoint refuses (400) lands in the dead-letter topic with
// its key, value, headers and every why-header, and is acked; the other
// records flow. A flapping endpoint (503 twice, then 200) delivers with
// three attempts, and the subscription's own retry budget (max attempts)
// dead-letters a record that never succeeds.
func TestFailedDeliveriesAreDeadLetteredWithWhyAndOthersFlow(t *testing.T) {
	testutil.KafkaTiers(t, 1, []string{"dlq"}, func(t *testing.T, brokers []string) {
		topic := "dlq"
		if !strings.HasSuffix(t.Name(), "/kfake") {
			// A topic of its own on the shared broker; its dead-letter
			// topic does not exist yet: keyhook must create it.
			topic = testutil.UniqueTopic("dlq")
			testutil.CreateTopics(t, brokers, 1, topic)
		}
		testDeadLetters(t, brokers, topic)
	})
}

func testDeadLetters(t *testing.T, brokers []string, topic string) {
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	var mu sync.Mutex
	calls := map[int64]int{}
	sink.Status = func(d *testutil.Delivery) int {
		mu.Lock()
		defer mu.Unlock()
		calls[d.Offset]++
		switch {
		case d.Offset == 10:
			return http.StatusBadRequest // poison: final at once
		case d.Offset == 20 && calls[20] <= 2:
			return http.StatusServiceUnavailable // flaps, then delivers
		case d.Offset == 30:
			return http.StatusInternalServerError // never succeeds: budget
		}
		return http.StatusOK
	}
	const n = 100
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range n {
		rec := &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i%7), Value: fmt.Appendf(nil, "v%d", i),
			Headers: []kgo.RecordHeader{{Key: "origin", Value: []byte("test")}}}
		if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	sub := newSub("dlq", topic, sink.URL, subscription.OrderKey, 8)
	sub.DeadLetterTopic = ""
	sub.Retry = subscription.RetryPolicy{InitialIntervalMS: 10, MaxIntervalMS: 20, MaxAttempts: 4}
	startNode(t, brokers, rdb, []*subscription.Subscription{sub}, nil)
	sink.WaitAcked(t, n-2, time.Minute)
	testutil.WaitCommitted(t, testutil.Admin(t, brokers), sub.GroupID(), map[int32]int64{0: n}, 30*time.Second)

	mu.Lock()
	if calls[20] != 3 || calls[10] != 1 || calls[30] != 4 {
		t.Errorf("attempts: flapping %d (want 3), poison %d (want 1), failing %d (want 4 = max_attempts)", calls[20], calls[10], calls[30])
	}
	mu.Unlock()

	// Read the dead-letter topic.
	consumer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic+".keyhook.dlq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	got := map[string]*kgo.Record{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for len(got) < 2 && ctx.Err() == nil {
		consumer.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == deadletter.HeaderOffset {
					got[string(h.Value)] = r
				}
			}
		})
	}
	for off, want := range map[string]struct {
		status, attempts string
	}{"10": {"400", "1"}, "30": {"500", "4"}} {
		r := got[off]
		if r == nil {
			t.Errorf("offset %s not in the dead-letter topic (got %d records)", off, len(got))
			continue
		}
		o, _ := strconv.Atoi(off)
		if string(r.Value) != fmt.Sprintf("v%d", o) || string(r.Key) != fmt.Sprintf("k%d", o%7) {
			t.Errorf("offset %s: dead letter key %q value %q, want the original", off, r.Key, r.Value)
		}
		h := map[string]string{}
		for _, x := range r.Headers {
			h[x.Key] = string(x.Value)
		}
		for k, v := range map[string]string{
			"origin":                      "test",
			deadletter.HeaderSubscription: sub.ID,
			deadletter.HeaderTopic:        topic,
			deadletter.HeaderPartition:    "0",
			deadletter.HeaderStatus:       want.status,
			deadletter.HeaderAttempts:     want.attempts,
			deadletter.HeaderDeliveryID:   dispatcher.DeliveryID(sub.ID, topic, 0, int64(o)),
		} {
			if h[k] != v {
				t.Errorf("offset %s: header %s = %q, want %q", off, k, h[k], v)
			}
		}
		for _, k := range []string{deadletter.HeaderFirstAttempt, deadletter.HeaderLastAttempt} {
			if _, err := time.Parse(time.RFC3339Nano, h[k]); err != nil {
				t.Errorf("offset %s: header %s = %q, not a time", off, k, h[k])
			}
		}
		if off == "30" && h[deadletter.HeaderError] == "" {
			t.Errorf("offset 30: no %s header saying the budget ran out", deadletter.HeaderError)
		}
	}
}

// Every delivery is signed (Standard Webhooks) and an independent verifier
// accepts it; across a rotation both secrets sign, so an endpoint that
// still knows only the old secret, and one that knows only the new, both
// verify.
func TestDeliveriesAreSignedAndVerifyAcrossRotation(t *testing.T) {
	brokers := testutil.Kfake(t, 1, "signed")
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	produce(t, brokers, "signed", 20, func(i int) string { return fmt.Sprintf("k%d", i) }, func(int) int32 { return 0 })

	sub := newSub("signed", "signed", sink.URL, subscription.OrderKey, 4)
	if err := sub.EnsureSigningSecret(time.Now()); err != nil {
		t.Fatal(err)
	}
	old := sub.Signing.Secrets[0].Secret
	newer, err := sub.RotateSigningSecret(time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	startNode(t, brokers, rdb, []*subscription.Subscription{sub}, nil)
	sink.WaitAcked(t, 20, 30*time.Second)

	for _, secret := range []string{old, newer.Secret} {
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range sink.Deliveries() {
			if err := wh.Verify(d.Body, d.Header); err != nil {
				t.Fatalf("offset %d: signature does not verify with one of the rotation's secrets: %v (webhook-signature %q)",
					d.Offset, err, d.Header.Get("webhook-signature"))
			}
		}
	}
}

// A dead letter the dead-letter topic cannot take (its max.message.bytes
// is smaller) is written without its value, saying so, rather than block
// its key forever: the partition's commit still reaches the end.
func TestTooLargeDeadLetterIsKeptWithoutItsValue(t *testing.T) {
	brokers := testutil.Kfake(t, 1, "big")
	rdb := testutil.StartRedis(t).Client()
	adm := testutil.Admin(t, brokers)
	small := "1024"
	if _, err := adm.CreateTopic(context.Background(), 1, 1, map[string]*string{"max.message.bytes": &small}, "big.keyhook.dlq"); err != nil {
		t.Fatal(err)
	}
	sink := testutil.StartSink(t)
	sink.Status = func(d *testutil.Delivery) int {
		if d.Offset == 1 {
			return http.StatusBadRequest
		}
		return http.StatusOK
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 3 {
		value := make([]byte, 4096)
		_, _ = rand.Read(value) // incompressible, so the batch stays large
		rec := &kgo.Record{Topic: "big", Key: []byte("k"), Value: value}
		if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
	}
	sub := newSub("big", "big", sink.URL, subscription.OrderKey, 2)
	sub.DeadLetterTopic = ""
	startNode(t, brokers, rdb, []*subscription.Subscription{sub}, nil)
	testutil.WaitCommitted(t, adm, sub.GroupID(), map[int32]int64{0: 3}, 30*time.Second)

	consumer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("big.keyhook.dlq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got *kgo.Record
	for got == nil && ctx.Err() == nil {
		consumer.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = r })
	}
	if got == nil {
		t.Fatal("no dead letter")
	}
	h := map[string]string{}
	for _, x := range got.Headers {
		h[x.Key] = string(x.Value)
	}
	if len(got.Value) != 0 || h[deadletter.HeaderValueDropped] != "4096" || h[deadletter.HeaderOffset] != "1" {
		t.Errorf("dead letter value %d bytes, headers %v; want no value, %s=4096, offset 1", len(got.Value), h, deadletter.HeaderValueDropped)
	}
}
