package verify

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/deadletter"
)

// TestOvershootFlagsCommitsPastUnackedOffsets proves the verifier can fail:
// a commit observed before an offset below it was acked, dead-lettered or
// known as a gap is reported with its distance past that offset.
func TestOvershootFlagsCommitsPastUnackedOffsets(t *testing.T) {
	base := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return base.Add(time.Duration(s) * time.Second) }
	// Partition 0, log end 7: offset 2 is a gap (a transaction marker),
	// offset 5 was dead-lettered at 6s, offset 6 was never acked.
	o := Outcome{
		Data: map[OffsetKey]*kgo.Record{},
		DeadLetters: map[OffsetKey]*kgo.Record{{0, 5}: {
			// The dead letter keeps the original record's timestamp; the
			// end of its last attempt says when it was dead-lettered.
			Timestamp: at(0),
			Headers:   []kgo.RecordHeader{{Key: deadletter.HeaderLastAttempt, Value: []byte(at(6).Format(time.RFC3339Nano))}},
		}},
	}
	for _, off := range []int64{0, 1, 3, 4, 5, 6} {
		o.Data[OffsetKey{0, off}] = &kgo.Record{}
	}
	firstAck := map[OffsetKey]time.Time{
		{0, 0}: at(1), {0, 1}: at(2), {0, 3}: at(4), {0, 4}: at(5),
	}
	tests := []struct {
		name      string
		sample    CommitSample
		wantWorst int64
		wantDescs int
	}{
		{"commit over acked offsets", CommitSample{at(2), 2}, 0, 0},
		{"commit over a gap", CommitSample{at(2), 3}, 0, 0},
		{"commit before the ack of an offset below it", CommitSample{at(3), 5}, 2, 1},
		{"commit over a dead letter, after it was written", CommitSample{at(6), 6}, 0, 0},
		{"commit over a dead letter, before it was written", CommitSample{at(5), 6}, 1, 1},
		{"commit over a record never acked", CommitSample{at(9), 7}, 1, 1},
		{"commit beyond the log end", CommitSample{at(9), 9}, 3, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			worst, descs := Overshoot(0, 7, []CommitSample{tt.sample}, o, firstAck)
			if diff := cmp.Diff([2]int64{tt.wantWorst, int64(tt.wantDescs)}, [2]int64{worst, int64(len(descs))}); diff != "" {
				t.Errorf("(overshoot, violations) (-want +got):\n%s\nviolations: %v", diff, descs)
			}
		})
	}
}
