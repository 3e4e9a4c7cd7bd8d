package tracking

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestAFlushWithoutStalledKeysKeepsTheStoredOnes defends the write-when-
// changed rule: a flush carrying no list leaves the last one in place, a
// flush with a list replaces it, and Load names each key's owner.
func TestAFlushWithoutStalledKeysKeepsTheStoredOnes(t *testing.T) {
	ctx := context.Background()
	s, _, _ := newStore(t, Config{})
	c, err := s.ClaimTopic(ctx, pkA, "node-a", 1, "")
	if err != nil {
		t.Fatalf("ClaimTopic: %v", err)
	}
	since := time.UnixMilli(1_700_000_000_000).UTC()
	first := &StalledKeys{Keys: []StalledKey{
		{Key: "b", Offset: 9, State: "parked", Since: since, Behind: 4, Parked: 4},
		{Key: "a", Offset: 3, State: "retrying", Since: since, Attempts: 2, LastStatus: 503, NextAttempt: since.Add(time.Second)},
	}, Total: 7}
	flush := func(st *StalledKeys) {
		t.Helper()
		if err := s.Flush(ctx, pkA, Flush{Epoch: c.Epoch, Watermark: 3, Fetched: 10, Committed: -1, Stalled: st}); err != nil {
			t.Fatalf("Flush: %v", err)
		}
	}
	flush(first)
	flush(nil)
	p := load(t, s, pkA)
	want := []OwnedStalledKey{{StalledKey: first.Keys[1], Owner: "node-a"}, {StalledKey: first.Keys[0], Owner: "node-a"}}
	if diff := cmp.Diff(want, p.Stalled); diff != "" || p.StalledTotal != 7 {
		t.Fatalf("stored keys after a flush without a list (-want +got):\n%s\ntotal %d, want 7", diff, p.StalledTotal)
	}
	flush(&StalledKeys{Keys: []StalledKey{}})
	if p := load(t, s, pkA); len(p.Stalled) != 0 || p.StalledTotal != 0 {
		t.Fatalf("stored keys after an empty list: %+v, total %d; want none", p.Stalled, p.StalledTotal)
	}
}
