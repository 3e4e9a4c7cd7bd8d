package partition

import (
	"testing"

	"github.com/keyhook/keyhook/tracking/offsets"
)

// TestInjectedRecordWaitsForItsKeysLiveRecordAndHoldsTheNext queues a
// redriven record on a key whose live record is in flight: it goes only
// after that one is acked, and the key's next live record only after it.
func TestInjectedRecordWaitsForItsKeysLiveRecordAndHoldsTheNext(t *testing.T) {
	m := newMachine(t, Config{})
	m.Claim(new(offsets.Set))
	m.Offer(recs("0:k", "1:j"))
	live := drainReady(t, m)
	if len(live) != 2 {
		t.Fatalf("ready before the inject: %d records, want 2", len(live))
	}
	extra := m.Inject([]byte("k"), "redrive k")
	if e := m.PeekExtra(); e != nil {
		t.Fatalf("injected record ready beside the key's live record in flight: %v", e.Payload)
	}
	m.Offer(recs("2:k"))
	m.Done(live[0], true)
	if e := m.PeekExtra(); e != extra {
		t.Fatalf("after the live record's ack PeekExtra = %v, want the injected record", e)
	}
	if err := m.DispatchExtra(extra); err != nil {
		t.Fatal(err)
	}
	if e := m.Peek(); e != nil {
		t.Fatalf("key's next record ready beside the injected one in flight: %v", e.Payload)
	}
	m.Done(extra, false)
	if e := m.Peek(); e == nil || e.Offset != 2 {
		t.Fatalf("after the injected record ended Peek = %v, want offset 2", e)
	}
	if got := m.Watermark(); got != 1 {
		t.Fatalf("watermark = %d, want 1: an injected record is no offset of the partition", got)
	}
	if m.InFlight() != 1 { // offset 1
		t.Fatalf("in flight = %d, want 1", m.InFlight())
	}
}

// TestInjectedRecordsOfOneKeyGoOneAtATime injects two records of one idle
// key: the second waits for the first; another key's goes at once.
func TestInjectedRecordsOfOneKeyGoOneAtATime(t *testing.T) {
	m := newMachine(t, Config{Batch: Batch{MaxRecords: 10}})
	m.Claim(new(offsets.Set))
	a := m.Inject([]byte("k"), "k first")
	m.Inject([]byte("k"), "k second")
	b := m.Inject([]byte("j"), "j")
	var sent []*Entry[string]
	for e := m.PeekExtra(); e != nil; e = m.PeekExtra() {
		if err := m.DispatchExtra(e); err != nil {
			t.Fatal(err)
		}
		sent = append(sent, e)
	}
	if len(sent) != 2 || sent[0] != a || sent[1] != b {
		t.Fatalf("sent %d injected records at once, want k's first and j's", len(sent))
	}
	if batch, _ := m.Assemble(); batch != nil {
		t.Fatalf("Assemble took %d injected records into a batch", len(batch))
	}
	m.Done(a, true)
	if e := m.PeekExtra(); e == nil || e.Payload != "k second" {
		t.Fatalf("after k's first ended PeekExtra = %v, want k's second", e)
	}
}
