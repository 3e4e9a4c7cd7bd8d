package tracking

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/keyhook/keyhook/tracking/offsets"
)

// A topic deleted and created again under the same name starts its
// offsets at 0 again; the acked ranges and commit mirror of the old topic
// must not make the new owner skip the new topic's records. A claim that
// knows the topic ID drops state of another ID, and only then.
func TestClaimOfAnotherTopicIDDropsTheOldOffsets(t *testing.T) {
	tests := []struct {
		name          string
		storedID      string // the ID the first owner claimed with
		claimID       string // the ID the second owner claims with
		wantAcked     []offsets.Range
		wantCommitted int64
		wantDiscarded string
		wantStoredID  string
	}{
		{"same topic keeps the offsets", "id-1", "id-1", []offsets.Range{{Start: 20, End: 25}}, 10, "", "id-1"},
		{"recreated topic drops them", "id-1", "id-2", nil, -1, "id-1", "id-2"},
		{"state without an id adopts the claimer's", "", "id-2", []offsets.Range{{Start: 20, End: 25}}, 10, "", "id-2"},
		{"claimer without an id compares nothing", "id-1", "", []offsets.Range{{Start: 20, End: 25}}, 10, "", "id-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			s, _, _ := newStore(t, Config{})
			first, err := s.ClaimTopic(ctx, pkA, "node-a", 1, tt.storedID)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Flush(ctx, pkA, Flush{Epoch: first.Epoch, Acked: setOf(offsets.Range{Start: 20, End: 25}),
				Watermark: 10, Fetched: 25, Committed: 10, Pending: 10, InFlight: 2, Keys: 2}); err != nil {
				t.Fatal(err)
			}
			second, err := s.ClaimTopic(ctx, pkA, "node-b", 2, tt.claimID)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.wantAcked, second.Acked.Ranges()); diff != "" {
				t.Errorf("acked (-want +got):\n%s", diff)
			}
			if second.Committed != tt.wantCommitted || second.DiscardedTopicID != tt.wantDiscarded || second.Epoch <= first.Epoch {
				t.Errorf("claim = %+v; want committed %d, discarded %q, a newer epoch than %d",
					second, tt.wantCommitted, tt.wantDiscarded, first.Epoch)
			}
			st, err := s.Load(ctx, []PartitionKey{pkA})
			if err != nil {
				t.Fatal(err)
			}
			got := st[pkA]
			if got.TopicID != tt.wantStoredID || got.Owner != "node-b" {
				t.Errorf("stored topic id %q owner %q; want %q, node-b", got.TopicID, got.Owner, tt.wantStoredID)
			}
			if tt.wantDiscarded != "" && (got.Watermark != -1 || got.Pending != 0 || got.InFlight != 0 || got.Committed != -1) {
				t.Errorf("state after a discarding claim = %+v; want no offsets left", got)
			}
		})
	}
}

// A zombie's claim that is fenced must not wipe the live owner's offsets,
// whatever topic ID it brings.
func TestFencedClaimOfAnotherTopicIDChangesNothing(t *testing.T) {
	ctx := context.Background()
	s, rdb, _ := newStore(t, Config{})
	c, err := s.ClaimTopic(ctx, pkA, "node-a", 5, "id-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx, pkA, Flush{Epoch: c.Epoch, Acked: setOf(offsets.Range{Start: 3, End: 4}), Watermark: 2, Fetched: 4, Committed: 2}); err != nil {
		t.Fatal(err)
	}
	before := stored(t, s, rdb, pkA)
	if _, err := s.ClaimTopic(ctx, pkA, "zombie", 4, "id-2"); err == nil {
		t.Fatal("claim of an older generation succeeded")
	}
	if diff := cmp.Diff(before, stored(t, s, rdb, pkA)); diff != "" {
		t.Errorf("fenced claim changed the state (-before +after):\n%s", diff)
	}
}
