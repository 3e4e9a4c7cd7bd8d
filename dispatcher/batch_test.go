package dispatcher_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/webhooks"
)

// batchEndpoint answers batch requests per the documented contract: it
// fails some records the first time it sees them, together with the later
// records of the same key in that batch, and accepts everything else.
type batchEndpoint struct {
	mu       sync.Mutex
	accepted map[string]int     // delivery id -> times accepted
	order    map[string][]int64 // key/partition -> offsets in acceptance order
	sizes    []int
	sameKey  int // batches with two or more records of one key
	tried    map[string]int
	failOnce func(offset int64) bool
}

func (e *batchEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var b webhooks.Batch
	if err := json.Unmarshal(body, &b); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sizes = append(e.sizes, len(b.Deliveries))
	perKey := map[string]int{}
	failedKeys := map[string]bool{}
	var failed []string
	for _, d := range b.Deliveries {
		key := *d.Key
		perKey[key]++
		off, _ := strconv.ParseInt(d.Attributes["offset"], 10, 64)
		e.tried[d.ID]++
		if failedKeys[key] || e.tried[d.ID] == 1 && e.failOnce(off) {
			failedKeys[key] = true // the key stops at its first failure
			failed = append(failed, d.ID)
			continue
		}
		e.accepted[d.ID]++
		lk := key + "/" + d.Attributes["partition"]
		e.order[lk] = append(e.order[lk], off)
	}
	for _, n := range perKey {
		if n > 1 {
			e.sameKey++
			break
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(webhooks.BatchResponse{Failed: failed})
}

// Batching: records go many per request, several of one key in offset
// order; a partial failure sends again only the failed records (and the
// later records of their keys), every record is accepted exactly once, and
// each key's records are accepted in offset order.
func TestBatchesKeepKeyOrderAndResendOnlyWhatFailed(t *testing.T) {
	brokers := testutil.Kfake(t, 2, "batched")
	rdb := testutil.StartRedis(t).Client()
	ep := &batchEndpoint{accepted: map[string]int{}, order: map[string][]int64{}, tried: map[string]int{},
		failOnce: func(o int64) bool { return o%13 == 5 }}
	srv := httptest.NewServer(ep)
	defer srv.Close()
	const n = 2000
	produce(t, brokers, "batched", n, func(i int) string { return fmt.Sprintf("k%d", i%7) }, func(i int) int32 { return int32(i % 2) })
	sub := newSub("batched", "batched", srv.URL+"/batch", subscription.OrderKey, 4)
	sub.Batch = subscription.Batch{MaxRecords: 50, MaxWaitMS: 20}
	startNode(t, brokers, rdb, []*subscription.Subscription{sub}, nil)
	testutil.WaitCommitted(t, testutil.Admin(t, brokers), sub.GroupID(), map[int32]int64{0: n / 2, 1: n / 2}, time.Minute)

	ep.mu.Lock()
	defer ep.mu.Unlock()
	if len(ep.accepted) != n {
		t.Fatalf("%d distinct records accepted, want %d", len(ep.accepted), n)
	}
	for id, c := range ep.accepted {
		if c != 1 {
			t.Errorf("record %s accepted %d times, want once", id, c)
		}
	}
	for id, c := range ep.tried {
		if c > 2 {
			t.Errorf("record %s sent %d times: only failed records and their keys' followers go again, once", id, c)
		}
	}
	for lane, offs := range ep.order {
		for i := 1; i < len(offs); i++ {
			if offs[i] <= offs[i-1] {
				t.Errorf("key/partition %s: offset %d accepted after %d", lane, offs[i], offs[i-1])
				break
			}
		}
	}
	max := 0
	for _, s := range ep.sizes {
		if s > max {
			max = s
		}
	}
	if max < 2 || ep.sameKey == 0 {
		t.Errorf("largest batch %d, batches with one key twice %d: batching did not batch", max, ep.sameKey)
	}
	t.Logf("%d batches, largest %d, %d with one key more than once", len(ep.sizes), max, ep.sameKey)
}

// A batch the endpoint refuses as a whole (400, because of one poison
// record) is delivered record by record, as envelopes: only the poison
// record is dead-lettered, every other one is accepted once.
func TestRefusedBatchFallsBackToSingleDeliveries(t *testing.T) {
	brokers := testutil.Kfake(t, 1, "batch-poison")
	rdb := testutil.StartRedis(t).Client()
	const poison = 37
	var mu sync.Mutex
	accepted := map[int64]int{}
	batches, singles := 0, 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		var b webhooks.Batch
		if json.Unmarshal(body, &b) == nil && b.Deliveries != nil {
			batches++
			for _, d := range b.Deliveries {
				if d.Attributes["offset"] == strconv.Itoa(poison) {
					http.Error(w, "poison in batch", http.StatusBadRequest)
					return
				}
			}
			for _, d := range b.Deliveries {
				off, _ := strconv.ParseInt(d.Attributes["offset"], 10, 64)
				accepted[off]++
			}
			return
		}
		var e webhooks.Envelope
		if err := json.Unmarshal(body, &e); err != nil || e.ID == "" {
			http.Error(w, "want an envelope", http.StatusBadRequest)
			return
		}
		singles++
		off, _ := strconv.ParseInt(e.Attributes["offset"], 10, 64)
		if off == poison {
			http.Error(w, "poison", http.StatusBadRequest)
			return
		}
		accepted[off]++
	}))
	defer srv.Close()
	const n = 200
	produce(t, brokers, "batch-poison", n, func(i int) string { return fmt.Sprintf("k%d", i%5) }, func(int) int32 { return 0 })
	sub := newSub("batch-poison", "batch-poison", srv.URL, subscription.OrderKey, 2)
	sub.DeadLetterTopic = ""
	sub.Batch = subscription.Batch{MaxRecords: 20, MaxWaitMS: 10}
	startNode(t, brokers, rdb, []*subscription.Subscription{sub}, nil)
	testutil.WaitCommitted(t, testutil.Admin(t, brokers), sub.GroupID(), map[int32]int64{0: n}, time.Minute)

	mu.Lock()
	defer mu.Unlock()
	for o := int64(0); o < n; o++ {
		want := 1
		if o == poison {
			want = 0
		}
		if accepted[o] != want {
			t.Errorf("offset %d accepted %d times, want %d", o, accepted[o], want)
		}
	}
	if singles == 0 || singles > 20 {
		t.Errorf("%d single deliveries, want the refused batch's records only (1..20)", singles)
	}
	t.Logf("%d batches, %d single deliveries after the refusal", batches, singles)
}

// A batch whose endpoint always reports one record failed spends one retry
// budget: max_attempts 3 means three requests in all, not three rounds of
// three attempts nor a fresh budget per record afterwards. The failing
// record is dead-lettered; the later record of its key, which the endpoint
// took, is acked once the failing one is settled; the others are acked.
func TestBatchPartialFailureSpendsOneAttemptBudget(t *testing.T) {
	brokers := testutil.Kfake(t, 1, "batch-budget")
	rdb := testutil.StartRedis(t).Client()
	const n, bad = 10, 3
	var mu sync.Mutex
	requests := 0
	accepted := map[int64]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		requests++
		var b webhooks.Batch
		if json.Unmarshal(body, &b) != nil || b.Deliveries == nil {
			http.Error(w, "want a batch", http.StatusBadRequest)
			return
		}
		var failed []string
		for _, d := range b.Deliveries {
			off, _ := strconv.ParseInt(d.Attributes["offset"], 10, 64)
			if off == bad {
				failed = append(failed, d.ID)
				continue
			}
			accepted[off]++
		}
		_ = json.NewEncoder(w).Encode(webhooks.BatchResponse{Failed: failed})
	}))
	defer srv.Close()
	// Record 7 shares record 3's key: it is held behind it every round.
	produce(t, brokers, "batch-budget", n, func(i int) string { return fmt.Sprintf("k%d", i%4) }, func(int) int32 { return 0 })
	sub := newSub("batch-budget", "batch-budget", srv.URL, subscription.OrderKey, 1)
	sub.DeadLetterTopic = ""
	sub.Retry.MaxAttempts = 3
	sub.Batch = subscription.Batch{MaxRecords: n, MaxWaitMS: 500}
	startNode(t, brokers, rdb, []*subscription.Subscription{sub}, nil)
	testutil.WaitCommitted(t, testutil.Admin(t, brokers), sub.GroupID(), map[int32]int64{0: n}, time.Minute)

	mu.Lock()
	defer mu.Unlock()
	if requests != 3 {
		t.Errorf("endpoint saw %d requests, want exactly max_attempts = 3", requests)
	}
	if accepted[bad] != 0 || accepted[7] == 0 {
		t.Errorf("accepted: bad record %d times, its key's follower %d times; want 0 and at least 1", accepted[bad], accepted[7])
	}
}
