package verify

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keyhook/keyhook/internal/testutil"
)

// TestClassifyOverlapsBlamesOnlyFailedSenders: an overlap counts as a
// redelivery after a failure when either of its requests came from a
// killed or stopped node, and as a broken lane otherwise.
func TestClassifyOverlapsBlamesOnlyFailedSenders(t *testing.T) {
	ov := func(earlier, later string) testutil.Overlap {
		return testutil.Overlap{Earlier: testutil.Delivery{Origin: earlier}, Later: testutil.Delivery{Origin: later}}
	}
	failed := map[string]bool{"node0-1": true}
	tests := []struct {
		name                string
		overlap             testutil.Overlap
		wantPlain, wantFail int
	}{
		{"two live nodes", ov("node1-1", "node2-1"), 1, 0},
		{"a dead node's request still in flight", ov("node0-1", "node1-1"), 0, 1},
		{"a zombie's late request", ov("node1-1", "node0-1"), 0, 1},
		{"the restarted node is a new sender", ov("node0-2", "node1-1"), 1, 0},
		{"unknown senders", ov("", ""), 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plain, failure := ClassifyOverlaps([]testutil.Overlap{tt.overlap}, failed)
			if diff := cmp.Diff([2]int{tt.wantPlain, tt.wantFail}, [2]int{len(plain), len(failure)}); diff != "" {
				t.Errorf("(plain, after a failure) (-want +got):\n%s", diff)
			}
		})
	}
}
