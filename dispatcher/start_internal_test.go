package dispatcher

import (
	"testing"

	"github.com/keyhook/keyhook/tracking"
)

// decideStart is the whole policy of where an assigned partition starts;
// each row is a situation seen in production and the start that neither
// skips records nor replays what the tracking state says was delivered.
func TestDecideStartNeverSkipsAndResumesWhatIsKnown(t *testing.T) {
	state := func(topicID string, watermark, committed int64) *tracking.PartitionState {
		return &tracking.PartitionState{TopicID: topicID, Watermark: watermark, Committed: committed}
	}
	tests := []struct {
		name       string
		committed  int64
		info       partitionStart
		bounds     bool
		start, end int64
		wantAt     int64
		wantReason string
	}{
		{"commit inside the log is kept", 40, partitionStart{topicID: "a", tracked: state("a", 40, 40)}, true, 0, 50, 0, ""},
		{"commit at the log end is kept", 50, partitionStart{topicID: "a"}, true, 0, 50, 0, ""},
		{"no commit and no state: the reset policy (earliest)", -2, partitionStart{topicID: "a"}, true, 0, 50, 0, ""},
		{"expired commit resumes at the tracked watermark", -2, partitionStart{topicID: "a", tracked: state("a", 30, 25)}, true, 0, 50, 30, resetOffsetsExpired},
		{"expired commit, state without a topic id", -2, partitionStart{topicID: "a", tracked: state("", 30, 25)}, true, 0, 50, 30, resetOffsetsExpired},
		{"expired commit, unknown bounds", -2, partitionStart{tracked: state("a", 30, 25)}, false, 0, 0, 30, resetOffsetsExpired},
		{"expired commit, watermark past the log end", -2, partitionStart{topicID: "a", tracked: state("a", 80, 80)}, true, 5, 50, 5, resetOutOfRange},
		{"expired commit, state of a deleted topic", -2, partitionStart{topicID: "b", tracked: state("a", 30, 30)}, true, 0, 50, 0, ""},
		{"commit of a deleted topic of the same name", 20, partitionStart{topicID: "b", tracked: state("a", 20, 20)}, true, 0, 30, 0, resetTopicRecreated},
		{"commit above the log end", 40, partitionStart{topicID: "a"}, true, 0, 30, 0, resetOutOfRange},
		{"commit below the log start", 3, partitionStart{topicID: "a"}, true, 10, 30, 10, resetOutOfRange},
		{"commit with unknown bounds is kept", 40, partitionStart{}, false, 0, 0, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			at, reason, _ := decideStart(tt.committed, tt.info, tt.bounds, tt.start, tt.end)
			if reason != tt.wantReason || (reason != "" && at != tt.wantAt) {
				t.Errorf("decideStart = %d %q; want %d %q", at, reason, tt.wantAt, tt.wantReason)
			}
		})
	}
}
