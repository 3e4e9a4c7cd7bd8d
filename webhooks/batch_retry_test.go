package webhooks_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keyhook/keyhook/webhooks"
)

// batchOf returns n messages, ids m0..m(n-1), their groups given in turn
// by groups (NoGroup when nil).
func batchOf(n int, groups func(i int) int64) []webhooks.BatchMessage {
	out := make([]webhooks.BatchMessage, n)
	for i := range out {
		g := int64(webhooks.NoGroup)
		if groups != nil {
			g = groups(i)
		}
		out[i] = webhooks.BatchMessage{Message: &webhooks.Message{ID: fmt.Sprintf("m%d", i), Value: []byte("{}")}, Group: g}
	}
	return out
}

// batchIDs decodes the delivery ids a batch request carried.
func batchIDs(t *testing.T, body []byte) []string {
	t.Helper()
	var b webhooks.Batch
	if err := json.Unmarshal(body, &b); err != nil {
		t.Fatalf("not a batch: %v", err)
	}
	ids := make([]string, len(b.Deliveries))
	for i, d := range b.Deliveries {
		ids[i] = d.ID
	}
	return ids
}

// failing answers 200 with the given ids failed, every time.
func failing(ids ...string) func(http.ResponseWriter, *http.Request, int) {
	return func(w http.ResponseWriter, _ *http.Request, _ int) {
		_ = json.NewEncoder(w).Encode(webhooks.BatchResponse{Failed: ids})
	}
}

func deliverBatch(t *testing.T, c *webhooks.Client, url string, ms []webhooks.BatchMessage, p webhooks.RetryPolicy) (webhooks.BatchDeliveryResult, []int) {
	t.Helper()
	var delivered []int
	res := c.DeliverBatch(context.Background(), &webhooks.BatchDelivery{
		Messages:    ms,
		Render:      func(ms []*webhooks.Message) (*webhooks.Request, error) { return webhooks.NewBatchRequest(url, ms) },
		OnDelivered: func(i int) { delivered = append(delivered, i) },
	}, p)
	return res, delivered
}

func TestDeliverBatchSpendsOneAttemptBudgetAcrossPartialFailures(t *testing.T) {
	ep := newEndpoint(t, failing("m1"))
	c := newClient(t, webhooks.ClientConfig{Clock: newFakeClock()})

	res, delivered := deliverBatch(t, c, ep.URL, batchOf(3, nil), webhooks.RetryPolicy{MaxAttempts: 3})

	if n := len(ep.requests()); n != 3 {
		t.Errorf("endpoint saw %d requests, want exactly max_attempts = 3", n)
	}
	if res.Outcome != webhooks.OutcomeFinal || res.Refused || !errors.Is(res.Err, webhooks.ErrRetryBudgetExhausted) || res.Attempts != 3 {
		t.Errorf("result {%s refused %v attempts %d err %v}, want final, budget spent after 3", res.Outcome, res.Refused, res.Attempts, res.Err)
	}
	if diff := cmp.Diff([]int{1}, res.Pending); diff != "" {
		t.Errorf("pending (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{0, 2}, delivered); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
}

func TestDeliverBatchResendsOnlyFailuresAndTheirGroupsFollowers(t *testing.T) {
	// Groups: m0 a, m1 b, m2 a, m3 b, m4 none, m5 a. m0 fails once: m2
	// and m5 wait for it; b and m4 go through in the first round.
	groups := []int64{0, 1, 0, 1, webhooks.NoGroup, 0}
	ep := newEndpoint(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			failing("m0")(w, r, n)
		}
	})
	c := newClient(t, webhooks.ClientConfig{Clock: newFakeClock()})

	res, delivered := deliverBatch(t, c, ep.URL, batchOf(6, func(i int) int64 { return groups[i] }), webhooks.RetryPolicy{MaxAttempts: 5})

	if res.Outcome != webhooks.OutcomeSuccess || res.Attempts != 2 || len(res.Pending) != 0 {
		t.Fatalf("result {%s attempts %d pending %v err %v}, want success in 2", res.Outcome, res.Attempts, res.Pending, res.Err)
	}
	seen := ep.requests()
	if diff := cmp.Diff([]string{"m0", "m2", "m5"}, batchIDs(t, seen[1].Body)); diff != "" {
		t.Errorf("second request carried (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{1, 3, 4, 0, 2, 5}, delivered); diff != "" {
		t.Errorf("delivered in order (-want +got):\n%s", diff)
	}
	if seen[0].Header.Get(webhooks.HeaderWebhookID) == seen[1].Header.Get(webhooks.HeaderWebhookID) {
		t.Errorf("a batch of other deliveries kept the batch id")
	}
}

func TestDeliverBatchWaitsForRetryAfterAndBacksOffWithJitter(t *testing.T) {
	ep := newEndpoint(t, func(w http.ResponseWriter, r *http.Request, n int) {
		switch n {
		case 1:
			_ = json.NewEncoder(w).Encode(webhooks.BatchResponse{Failed: []string{"m0"}, RetryAfter: 7})
		case 2:
			failing("m0")(w, r, n)
		}
	})
	clock := newFakeClock()
	c := newClient(t, webhooks.ClientConfig{Clock: clock})
	p := webhooks.RetryPolicy{InitialInterval: time.Second, MaxInterval: time.Minute, RandomizationFactor: 0.5}

	res, _ := deliverBatch(t, c, ep.URL, batchOf(2, nil), p)

	if res.Outcome != webhooks.OutcomeSuccess || res.Attempts != 3 {
		t.Fatalf("result {%s attempts %d err %v}, want success in 3", res.Outcome, res.Attempts, res.Err)
	}
	w := clock.Waits()
	if len(w) != 2 || w[0] != 7*time.Second || w[1] < time.Second || w[1] > 3*time.Second {
		t.Errorf("waits %v, want [7s (retry_after), within [1s, 3s] (second backoff, jittered)]", w)
	}
}

func TestDeliverBatchRetriesAWholeBatchFailureAsOneAttempt(t *testing.T) {
	ep := newEndpoint(t, statuses(http.StatusServiceUnavailable, http.StatusOK))
	c := newClient(t, webhooks.ClientConfig{Clock: newFakeClock()})

	res, delivered := deliverBatch(t, c, ep.URL, batchOf(3, nil), webhooks.RetryPolicy{MaxAttempts: 2})

	if res.Outcome != webhooks.OutcomeSuccess || res.Attempts != 2 || len(delivered) != 3 {
		t.Errorf("result {%s attempts %d delivered %v}, want success in 2 with all 3", res.Outcome, res.Attempts, delivered)
	}
}

func TestDeliverBatchReportsARefusedBatchForOneByOneDelivery(t *testing.T) {
	for _, tc := range []struct {
		name   string
		handle func(http.ResponseWriter, *http.Request, int)
		ms     []webhooks.BatchMessage
	}{
		{"final status", statuses(http.StatusBadRequest), batchOf(3, nil)},
		{"unrenderable", statuses(http.StatusOK), append(batchOf(2, nil), webhooks.BatchMessage{Message: &webhooks.Message{ID: "m0"}, Group: webhooks.NoGroup})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := newEndpoint(t, tc.handle)
			c := newClient(t, webhooks.ClientConfig{Clock: newFakeClock()})

			res, delivered := deliverBatch(t, c, ep.URL, tc.ms, webhooks.RetryPolicy{MaxAttempts: 5})

			if res.Outcome != webhooks.OutcomeFinal || !res.Refused || errors.Is(res.Err, webhooks.ErrRetryBudgetExhausted) {
				t.Errorf("result {%s refused %v err %v}, want final and refused", res.Outcome, res.Refused, res.Err)
			}
			if len(res.Pending) != len(tc.ms) || len(delivered) != 0 {
				t.Errorf("pending %v delivered %v, want every message pending", res.Pending, delivered)
			}
		})
	}
}

func TestDeliverBatchLeavesPendingMessagesUnackedWhenTheContextEnds(t *testing.T) {
	ep := newEndpoint(t, failing("m0"))
	c := newClient(t, webhooks.ClientConfig{Clock: newFakeClock()})
	ctx, cancel := context.WithCancel(context.Background())
	res := c.DeliverBatch(ctx, &webhooks.BatchDelivery{
		Messages:  batchOf(2, nil),
		Render:    func(ms []*webhooks.Message) (*webhooks.Request, error) { return webhooks.NewBatchRequest(ep.URL, ms) },
		OnAttempt: func(webhooks.Attempt) { cancel() },
	}, webhooks.RetryPolicy{})

	if res.Outcome != webhooks.OutcomeRetry || res.Refused || len(res.Pending) != 1 {
		t.Errorf("result {%s refused %v pending %v}, want retry with m0 pending", res.Outcome, res.Refused, res.Pending)
	}
}

func TestDeliverBatchNamesTheMessagesOnlyHeldBackWhenTheBudgetIsSpent(t *testing.T) {
	// m0 and m1 share a group; the endpoint always fails m0 and takes m1,
	// which must still wait for m0.
	ep := newEndpoint(t, failing("m0"))
	c := newClient(t, webhooks.ClientConfig{Clock: newFakeClock()})

	res, delivered := deliverBatch(t, c, ep.URL, batchOf(3, func(i int) int64 { return []int64{0, 0, 1}[i] }), webhooks.RetryPolicy{MaxAttempts: 2})

	if res.Outcome != webhooks.OutcomeFinal || res.Refused || len(ep.requests()) != 2 {
		t.Fatalf("result {%s refused %v} after %d requests, want final after 2", res.Outcome, res.Refused, len(ep.requests()))
	}
	got := struct{ Delivered, Pending, Held []int }{delivered, res.Pending, res.Held}
	want := struct{ Delivered, Pending, Held []int }{[]int{2}, []int{0, 1}, []int{1}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
