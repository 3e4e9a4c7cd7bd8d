package subscription

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestSeekValidateNamesEveryProblem(t *testing.T) {
	sub := &Subscription{Topics: []string{"orders", "refunds"}}
	ts := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tt := range []struct {
		name   string
		req    SeekRequest
		fields []string
	}{
		{"earliest", SeekRequest{To: SeekEarliest}, nil},
		{"latest", SeekRequest{To: SeekLatest}, nil},
		{"timestamp", SeekRequest{To: SeekTimestamp, Timestamp: ts}, nil},
		{"offsets", SeekRequest{To: SeekOffsets, Offsets: []SeekOffset{{"orders", 0, 5}, {"refunds", 0, 0}}}, nil},
		{"missing to", SeekRequest{}, []string{"to"}},
		{"unknown to", SeekRequest{To: "now"}, []string{"to"}},
		{"timestamp missing", SeekRequest{To: SeekTimestamp}, []string{"timestamp"}},
		{"timestamp not wanted", SeekRequest{To: SeekLatest, Timestamp: ts}, []string{"timestamp"}},
		{"offsets missing", SeekRequest{To: SeekOffsets}, []string{"offsets"}},
		{"offsets not wanted", SeekRequest{To: SeekEarliest, Offsets: []SeekOffset{{"orders", 0, 1}}}, []string{"offsets"}},
		{"bad offsets", SeekRequest{To: SeekOffsets, Offsets: []SeekOffset{{"payments", -1, -1}, {"orders", 1, 1}, {"orders", 1, 2}}},
			[]string{"offsets[0].topic", "offsets[0].partition", "offsets[0].offset", "offsets[2]"}},
		{"too many offsets", SeekRequest{To: SeekOffsets, Offsets: make([]SeekOffset, MaxSeekOffsets+1)}, []string{"offsets"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, fe := range tt.req.Validate(sub) {
				got = append(got, fe.Field)
			}
			if diff := cmp.Diff(tt.fields, got); diff != "" {
				t.Errorf("fields (-want +got):\n%s", diff)
			}
		})
	}
}
