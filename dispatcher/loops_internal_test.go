package dispatcher

import (
	"fmt"
	"testing"
)

// Subscriptions' commits spread over the interval's slices: a thousand
// ids use every slice, none more than 1.5× its share, and an id keeps its
// slice (its commits stay an interval apart).
func TestCommitSlicesSpreadSubscriptions(t *testing.T) {
	const n = 1000
	var per [commitSlices]int
	for i := range n {
		id := fmt.Sprintf("sub_%06d", i)
		s := commitSlice(id)
		if s < 0 || s >= commitSlices {
			t.Fatalf("%s: slice %d out of [0, %d)", id, s, commitSlices)
		}
		if commitSlice(id) != s {
			t.Fatalf("%s changed slice", id)
		}
		per[s]++
	}
	for s, c := range per {
		if c == 0 || c > n/commitSlices*3/2 {
			t.Errorf("slice %d has %d of %d subscriptions: %v", s, c, n, per)
		}
	}
}
