package partition

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkSkippedRecord measures a record the filter rejected through the
// machine (offered, acked at once) against a record delivered (offered,
// dispatched, acked), timed in the same run over batches of 500 records
// of 50 keys; ratio is the skipped record's cost over the delivered one's.
func BenchmarkSkippedRecord(b *testing.B) {
	keys := make([][]byte, 50)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "key-%d", i)
	}
	batch := func(off int64, skip bool) []Record[int64] {
		recs := make([]Record[int64], 500)
		for i := range recs {
			recs[i] = Record[int64]{Offset: off + int64(i), Key: keys[i%len(keys)], Skip: skip, Size: 100, Bytes: 500, Payload: off + int64(i)}
		}
		return recs
	}
	newM := func() *Machine[int64] {
		m, err := New[int64](Config{Ordering: OrderKey, MaxWindow: 1000})
		if err != nil {
			b.Fatal(err)
		}
		m.SetCommitted(0)
		m.Claim(nil)
		return m
	}
	skipped, delivered := newM(), newM()
	var tSkip, tDeliver time.Duration
	var off int64
	for b.Loop() {
		sr, dr := batch(off, true), batch(off, false)
		t0 := time.Now()
		skipped.Offer(sr)
		t1 := time.Now()
		delivered.Offer(dr)
		for delivered.Pending() > 0 {
			e := delivered.Peek()
			if e == nil {
				b.Fatal("nothing ready")
			}
			if err := delivered.Dispatch(e); err != nil {
				b.Fatal(err)
			}
			delivered.Done(e, true)
		}
		t2 := time.Now()
		tSkip += t1.Sub(t0)
		tDeliver += t2.Sub(t1)
		off += 500
	}
	if skipped.Watermark() != off || skipped.Filtered() != off {
		b.Fatalf("skipped: watermark %d, filtered %d, want %d", skipped.Watermark(), skipped.Filtered(), off)
	}
	n := float64(b.N * 500)
	b.ReportMetric(float64(tSkip.Nanoseconds())/n, "ns/skipped")
	b.ReportMetric(float64(tDeliver.Nanoseconds())/n, "ns/delivered")
	b.ReportMetric(float64(tSkip)/float64(max(tDeliver, 1)), "ratio")
}
