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

// The tracking state lists every key not flowing, not only the one
// holding the watermark: two failing keys, each with its attempts and
// last answer, while the others are delivered and left out.
func TestTrackingStateListsEveryRetryingKey(t *testing.T) {
	brokers := testutil.Kfake(t, 1, "stalled")
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	sink.Status = func(d *testutil.Delivery) int {
		if d.Key == "down-1" || d.Key == "down-2" {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	}
	keyOf := func(i int) string {
		switch i {
		case 0, 1:
			return "down-1"
		case 5:
			return "down-2"
		}
		return fmt.Sprintf("key-%d", i)
	}
	produce(t, brokers, "stalled", 20, keyOf, func(int) int32 { return 0 })
	sub := newSub("stalled", "stalled", sink.URL, subscription.OrderKey, 8)
	sub.Retry = subscription.RetryPolicy{MaxAttempts: 1000}
	startNode(t, brokers, rdb, []*subscription.Subscription{sub}, func(c *dispatcher.Config) {
		c.Retry = webhooks.RetryPolicy{InitialInterval: 100 * time.Millisecond, MaxInterval: 300 * time.Millisecond}
	})
	sink.WaitAcked(t, 17, time.Minute)

	tr, err := tracking.New(rdb, tracking.Config{})
	if err != nil {
		t.Fatal(err)
	}
	pk := tracking.PartitionKey{Subscription: sub.ID, Topic: "stalled", Partition: 0}
	var keys []tracking.OwnedStalledKey
	testutil.WaitFor(t, 30*time.Second, "the tracking state lists both failing keys after 3 attempts each", func() bool {
		st, err := tr.Load(context.Background(), []tracking.PartitionKey{pk})
		if err != nil {
			return false
		}
		keys = st[pk].Stalled
		return len(keys) == 2 && keys[0].Attempts >= 3 && keys[1].Attempts >= 3
	})
	for i, want := range []struct {
		key    string
		offset int64
		behind int64
	}{{"down-1", 0, 1}, {"down-2", 5, 0}} {
		k := keys[i]
		if k.Key != want.key || k.Offset != want.offset || k.Behind != want.behind || k.State != string(subscription.KeyRetrying) ||
			k.LastStatus != 503 || k.Owner == "" || k.Since.IsZero() {
			t.Errorf("key %d = %+v; want %s at offset %d retrying after 503, %d behind, with its owner", i, k, want.key, want.offset, want.behind)
		}
	}
}
