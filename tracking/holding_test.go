package tracking

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The record holding a claim's watermark is stored with each flush and
// read back per range and for the partition (the lowest of the sharers'),
// so the status answers why the commit does not move; a flush with
// nothing pending clears it.
func TestFlushStoresTheRecordHoldingTheWatermark(t *testing.T) {
	s, _, _ := newStore(t, Config{})
	a := mustClaimRanges(t, s, pkA, "node-a", 1, lower)
	b := mustClaimRanges(t, s, pkA, "node-b", 1, upper)
	since := time.UnixMilli(1_700_000_000_000).UTC()
	ha := &Holding{Offset: 7, Key: "order-7", Since: since, Attempts: 4, LastStatus: 503, NextAttempt: since.Add(time.Minute), Behind: 12}
	hb := &Holding{Offset: 3, Key: "order-3", Since: since, Dispatched: since.Add(time.Second), Attempts: 1}
	flushOne(t, s, pkA, Flush{Epoch: a.Epoch, Ranges: lower, Watermark: 7, Committed: -1, Pending: 13, Holding: ha})
	flushOne(t, s, pkA, Flush{Epoch: b.Epoch, Ranges: upper, Watermark: 3, Committed: -1, Pending: 1, Holding: hb})
	st := load(t, s, pkA)
	if diff := cmp.Diff(hb, st.Holding); diff != "" {
		t.Errorf("partition holding (-want +got):\n%s", diff)
	}
	if len(st.Ranges) != 2 || !cmp.Equal(ha, st.Ranges[0].Holding) || !cmp.Equal(hb, st.Ranges[1].Holding) {
		t.Errorf("range holdings: %+v", st.Ranges)
	}
	flushOne(t, s, pkA, Flush{Epoch: b.Epoch, Ranges: upper, Watermark: 9, Committed: -1})
	if st := load(t, s, pkA); !cmp.Equal(ha, st.Holding) || st.Ranges[1].Holding != nil {
		t.Errorf("after the upper range caught up: partition holding %+v, upper %+v", st.Holding, st.Ranges[1].Holding)
	}
}
