package dispatcher_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
	"github.com/keyhook/keyhook/webhooks"
)

// Why does the commit not move: the tracking state names the record
// holding the watermark — its offset and key, its attempts, the last
// answer, when it is tried next and what waits behind it — and keeps it
// current while nothing else changes.
func TestTrackingStateNamesTheRecordHoldingTheWatermark(t *testing.T) {
	brokers := testutil.Kfake(t, 1, "holding")
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	sink.Status = func(d *testutil.Delivery) int {
		if d.Key == "stuck" {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	}
	keyOf := func(i int) string {
		if i < 3 {
			return "stuck"
		}
		return fmt.Sprintf("key-%d", i)
	}
	produce(t, brokers, "holding", 23, keyOf, func(int) int32 { return 0 })
	sub := newSub("holding", "holding", sink.URL, subscription.OrderKey, 8)
	sub.Retry = subscription.RetryPolicy{MaxAttempts: 1000}
	startNode(t, brokers, rdb, []*subscription.Subscription{sub}, func(c *dispatcher.Config) {
		c.Retry = webhooks.RetryPolicy{InitialInterval: 100 * time.Millisecond, MaxInterval: 300 * time.Millisecond}
	})
	sink.WaitAcked(t, 20, time.Minute)

	tr, err := tracking.New(rdb, tracking.Config{})
	if err != nil {
		t.Fatal(err)
	}
	pk := tracking.PartitionKey{Subscription: sub.ID, Topic: "holding", Partition: 0}
	var h *tracking.Holding
	testutil.WaitFor(t, 30*time.Second, "the tracking state shows the stuck record after 4 attempts", func() bool {
		st, err := tr.Load(context.Background(), []tracking.PartitionKey{pk})
		if err != nil {
			return false
		}
		h = st[pk].Holding
		return h != nil && h.Attempts >= 4
	})
	if h.Offset != 0 || h.Key != "stuck" || h.LastStatus != 503 || h.Behind != 2 || h.Since.IsZero() {
		t.Errorf("holding = %+v; want offset 0, key stuck, last status 503, 2 records behind", h)
	}
	if h.NextAttempt.IsZero() && h.Dispatched.IsZero() {
		t.Errorf("holding = %+v; want it either in flight or waiting for a next attempt", h)
	}
}
