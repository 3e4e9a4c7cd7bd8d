package dispatcher

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/partition"
)

// The hand-off: the pool gets each record's payload and lane as a job,
// its result finds the entry again by the record, and a record the
// retention guard marks expiring while it is out, or marked before it
// went, reads as expiring to its delivery through the outbox alone, until
// its result comes back.
func TestTheOutboxMapsResultsBackAndTellsDeliveriesTheirRecordIsExpiring(t *testing.T) {
	m, err := partition.New[*kgo.Record](partition.Config{MaxWindow: 10})
	if err != nil {
		t.Fatal(err)
	}
	m.Claim(nil)
	t0 := time.Unix(1_700_000_000, 0)
	var fetched []*kgo.Record
	var offer []partition.Record[*kgo.Record]
	for i, key := range []string{"a", "b", "a"} {
		r := &kgo.Record{Topic: "t", Offset: int64(i), Key: []byte(key), Timestamp: t0.Add(time.Duration(i) * time.Second)}
		fetched = append(fetched, r)
		offer = append(offer, machineRecord(r))
	}
	m.Offer(offer) // the machine takes the slice over
	var o outbox
	w := &worker{}
	var jobs []job
	for e := m.Peek(); e != nil; e = m.Peek() {
		if err := m.Dispatch(e); err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, o.send(w, e))
	}
	// a/0 and b/1 are out; a/2 waits behind a/0.
	if len(jobs) != 2 || jobs[0].rec != fetched[0] || jobs[1].rec != fetched[1] {
		t.Fatalf("jobs %+v (offsets %d, %d), want the records of offsets 0 and 1", jobs, jobs[0].rec.Offset, jobs[len(jobs)-1].rec.Offset)
	}
	if !jobs[0].laned || jobs[0].lane != "a" || !jobs[1].laned || jobs[1].lane != "b" {
		t.Errorf("lanes %q/%v %q/%v, want a and b", jobs[0].lane, jobs[0].laned, jobs[1].lane, jobs[1].laned)
	}
	for _, j := range jobs {
		if o.isExpiring(j.rec) {
			t.Errorf("offset %d expiring before the guard marked it", j.rec.Offset)
		}
	}

	// The guard finds 0 (out) and 2 (queued) about to be deleted: 0's
	// delivery learns of it; 2 leaves its key's turn and goes marked.
	if n := m.Expire(t0.Add(2500*time.Millisecond), 100); n != 3 {
		t.Fatalf("expire found %d, want 3", n)
	}
	o.expired()
	if !o.isExpiring(jobs[0].rec) || !o.isExpiring(jobs[1].rec) {
		t.Error("records out marked expiring by the guard do not read as expiring to their deliveries")
	}
	e := m.Peek()
	if e == nil || e.Offset != 2 {
		t.Fatalf("after Expire, ready %v, want offset 2 out of its key's turn", e)
	}
	if err := m.Dispatch(e); err != nil {
		t.Fatal(err)
	}
	j := o.send(w, e)
	if !o.isExpiring(j.rec) {
		t.Error("a record marked expiring before it went out does not read as expiring to its delivery")
	}

	// Results name their entries: acked, they leave the machine.
	for _, j := range append(jobs, j) {
		e, ok := o.take(j.rec)
		if !ok || e.Payload != j.rec {
			t.Fatalf("result of offset %d names entry %v (%v)", j.rec.Offset, e, ok)
		}
		m.Done(e, true)
		if o.isExpiring(j.rec) {
			t.Errorf("offset %d still reads as expiring after its result", j.rec.Offset)
		}
	}
	if _, ok := o.take(jobs[0].rec); ok {
		t.Error("a second result for one hand-off found an entry")
	}
	if m.Pending() != 0 || m.InFlight() != 0 || len(o.out) != 0 {
		t.Errorf("pending %d, in flight %d, outbox %d after every result, want none", m.Pending(), m.InFlight(), len(o.out))
	}
}
