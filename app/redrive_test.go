package app_test

import (
	"net/http"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/internal/testutil"
)

// succeeded returns the sink's 2xx deliveries, in the order they started.
func succeeded(s *testutil.Sink) []testutil.Delivery {
	var out []testutil.Delivery
	for _, d := range s.Deliveries() {
		if d.Status == http.StatusOK {
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

// TestRedriveSendsAKeysDeadLettersInOffsetOrder redrives two dead letters
// of one key: the second goes only once the endpoint answered the first.
func TestRedriveSendsAKeysDeadLettersInOffsetOrder(t *testing.T) {
	const topic = "orders"
	brokers := testutil.Kfake(t, 1, topic)
	n := startNode(t, brokers)
	sink := testutil.StartSink(t)
	var accept atomic.Bool
	sink.Status = func(*testutil.Delivery) int {
		if accept.Load() {
			return http.StatusOK
		}
		return http.StatusBadRequest
	}
	sink.Latency = func(*testutil.Delivery) time.Duration {
		if accept.Load() {
			return 300 * time.Millisecond
		}
		return 0
	}
	id := n.subscribe(t, topic, sink.URL)
	produce(t, brokers, topic, &kgo.Record{Key: []byte("k"), Value: []byte("first")}, &kgo.Record{Key: []byte("k"), Value: []byte("second")})
	eventually(t, 20*time.Second, "two dead letters", func() bool { return n.deadLetters(t, id) == 2 })

	accept.Store(true)
	var res struct{ Redriven int }
	if code := n.call(t, http.MethodPost, "/v1/subscriptions/"+id+"/dead-letters/redrive", `{"all":true}`, &res); code != http.StatusOK || res.Redriven != 2 {
		t.Fatalf("redrive = %d %+v, want 200 and 2 redriven", code, res)
	}
	eventually(t, 15*time.Second, "both redriven records delivered", func() bool { return len(succeeded(sink)) == 2 })
	got := succeeded(sink)
	if got[0].Offset != 0 || got[1].Offset != 1 {
		t.Fatalf("redriven offsets in order sent: %d, %d; want 0, 1", got[0].Offset, got[1].Offset)
	}
	if gap := got[1].Start.Sub(got[0].End); gap < 0 {
		t.Fatalf("offset 1 sent %v before offset 0 was answered; want it after", -gap)
	}
}

// TestRedriveWaitsForTheKeysLiveRecord redrives a dead letter of a key
// while a later record of that key is in flight at the partition's owner:
// the redrive is not sent beside it.
func TestRedriveWaitsForTheKeysLiveRecord(t *testing.T) {
	const topic = "orders"
	brokers := testutil.Kfake(t, 1, topic)
	n := startNode(t, brokers)
	sink := testutil.StartSink(t)
	var accept atomic.Bool
	sink.Status = func(d *testutil.Delivery) int {
		if d.Offset == 0 && !accept.Load() {
			return http.StatusBadRequest
		}
		return http.StatusOK
	}
	sink.Latency = func(d *testutil.Delivery) time.Duration {
		if d.Offset == 1 {
			return time.Second
		}
		return 0
	}
	id := n.subscribe(t, topic, sink.URL)
	produce(t, brokers, topic, &kgo.Record{Key: []byte("k"), Value: []byte("dead")})
	eventually(t, 20*time.Second, "a dead letter", func() bool { return n.deadLetters(t, id) == 1 })

	accept.Store(true)
	produce(t, brokers, topic, &kgo.Record{Key: []byte("k"), Value: []byte("live")})
	eventually(t, 10*time.Second, "the live record in flight", func() bool { return sink.InFlight() == 1 })
	var res struct{ Redriven int }
	if code := n.call(t, http.MethodPost, "/v1/subscriptions/"+id+"/dead-letters/redrive", `{"all":true}`, &res); code != http.StatusOK || res.Redriven != 1 {
		t.Fatalf("redrive = %d %+v, want 200 and 1 redriven", code, res)
	}
	eventually(t, 15*time.Second, "the live and the redriven record delivered", func() bool { return len(succeeded(sink)) == 2 })
	var live, redriven testutil.Delivery
	for _, d := range succeeded(sink) {
		if d.Offset == 1 {
			live = d
		} else {
			redriven = d
		}
	}
	if gap := redriven.Start.Sub(live.End); gap < 0 {
		t.Fatalf("redrive of the key sent %v before its live record was answered; want it after", -gap)
	}
}
