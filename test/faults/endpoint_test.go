package faults

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyhook/keyhook/deadletter"
	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/internal/verify"
)

// The endpoint answers 503 to everything for 30 s, then recovers: every
// record is retried until it is delivered, none is dead-lettered or lost,
// and no failure of keyhook means no duplicate.
func TestFaultEndpointOutage(t *testing.T) {
	const records, rate, outage = 20_000, 1_000, 30 * time.Second
	var down atomic.Bool
	c := newCluster(t, "endpoint-outage", clusterConfig{
		latency: smallLatency,
		status: func(*testutil.Delivery) int {
			if down.Load() {
				return http.StatusServiceUnavailable
			}
			return http.StatusOK
		},
	})
	c.startNodes()
	prod := c.produce(records, rate)
	sleepFor(5 * time.Second)
	down.Store(true)
	sleepFor(outage)
	down.Store(false)
	recovered := time.Now()
	prod.wait(time.Minute)
	o := c.finish()
	refused := 0
	for _, d := range c.sink.Deliveries() {
		if d.Status == http.StatusServiceUnavailable {
			refused++
		}
	}
	if refused == 0 {
		t.Error("the sink refused nothing: the outage did not happen")
	}
	if len(o.DeadLetters) != 0 {
		t.Errorf("%d records dead-lettered by a retryable outage, want 0", len(o.DeadLetters))
	}
	t.Logf("  %d attempts refused with 503 during the outage; settled %.1fs after the endpoint recovered",
		refused, time.Since(recovered).Seconds())
}

// One record is refused with 400 (final): it goes to the dead-letter topic,
// with headers saying where it came from and why, and every other record —
// its key's later ones included — is delivered.
func TestFaultPoisonRecord(t *testing.T) {
	const records, poison = 10_000, 4321
	c := newCluster(t, "poison", clusterConfig{
		latency: smallLatency,
		status: func(d *testutil.Delivery) int {
			if seq, err := verify.SeqOf(d.Body); err == nil && seq == poison {
				return http.StatusBadRequest
			}
			return http.StatusOK
		},
	})
	c.startNodes()
	c.produce(records, 0).wait(time.Minute)
	o := c.finish()

	if len(o.DeadLetters) != 1 {
		t.Fatalf("%d dead letters, want exactly 1 (the poison record)", len(o.DeadLetters))
	}
	for k, dl := range o.DeadLetters {
		orig := o.Data[k]
		if seq, _ := verify.SeqOf(orig.Value); seq != poison {
			t.Errorf("dead letter is record %d (%s), want %d", seq, orig.Value, poison)
		}
		if string(dl.Key) != string(orig.Key) || string(dl.Value) != string(orig.Value) {
			t.Errorf("dead letter key/value %q/%q, want the original %q/%q", dl.Key, dl.Value, orig.Key, orig.Value)
		}
		want := map[string]string{
			deadletter.HeaderSubscription: c.sub.ID,
			deadletter.HeaderTopic:        c.topic,
			deadletter.HeaderPartition:    strconv.Itoa(int(k.Partition)),
			deadletter.HeaderOffset:       strconv.FormatInt(k.Offset, 10),
			deadletter.HeaderDeliveryID:   dispatcher.DeliveryID(c.sub.ID, c.topic, k.Partition, k.Offset),
			deadletter.HeaderStatus:       "400",
			deadletter.HeaderAttempts:     "1",
		}
		for h, v := range want {
			if got := verify.Header(dl, h); got != v {
				t.Errorf("dead letter header %s = %q, want %q", h, got, v)
			}
		}
		if !verify.HasHeader(dl, deadletter.HeaderError) {
			t.Errorf("dead letter lacks header %s", deadletter.HeaderError)
		}
		var first, last time.Time
		for h, at := range map[string]*time.Time{deadletter.HeaderFirstAttempt: &first, deadletter.HeaderLastAttempt: &last} {
			v, err := time.Parse(time.RFC3339Nano, verify.Header(dl, h))
			if err != nil {
				t.Errorf("dead letter header %s = %q: %v", h, verify.Header(dl, h), err)
			}
			*at = v
		}
		if last.Before(first) || time.Since(first) > 10*time.Minute {
			t.Errorf("dead letter attempts from %v to %v make no sense", first, last)
		}
		// The endpoint saw the record once, refused, with the same
		// delivery id the dead letter names.
		var seen []testutil.Delivery
		for _, d := range c.sink.Deliveries() {
			if d.Partition == k.Partition && d.Offset == k.Offset {
				seen = append(seen, d)
			}
		}
		if len(seen) != 1 || seen[0].Status != http.StatusBadRequest || seen[0].ID != want[deadletter.HeaderDeliveryID] {
			t.Errorf("the endpoint saw the poison record as %+v, want one 400 with webhook-id %s", seen, want[deadletter.HeaderDeliveryID])
		}
		t.Logf("  poison record %d at %s/%d@%d dead-lettered to %s@%d: status %s, error %q",
			poison, c.topic, k.Partition, k.Offset, c.dlq, dl.Offset, verify.Header(dl, deadletter.HeaderStatus), verify.Header(dl, deadletter.HeaderError))
	}
}
