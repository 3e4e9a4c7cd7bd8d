package dispatcher

import (
	"fmt"
	"testing"
	"time"
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

// A node's groups commit every commit interval until there are more of
// them than the rate allows in one; then each commits every groups ÷
// rate seconds, so the node's commits a second stay at the rate.
func TestCommitEveryStretchesTheIntervalPastTheRate(t *testing.T) {
	for _, c := range []struct {
		interval     time.Duration
		rate, groups int
		want         time.Duration
	}{
		{time.Second, 200, 0, time.Second},
		{time.Second, 200, 100, time.Second},
		{time.Second, 200, 200, time.Second},
		{time.Second, 200, 201, 1005 * time.Millisecond},
		{time.Second, 200, 1000, 5 * time.Second},
		{time.Second, 0, 1000, time.Second},
		{50 * time.Millisecond, 16, 16, time.Second},
		{10 * time.Second, 200, 1000, 10 * time.Second},
	} {
		if got := commitEvery(c.interval, c.rate, c.groups); got != c.want {
			t.Errorf("commitEvery(%v, %d, %d) = %v, want %v", c.interval, c.rate, c.groups, got, c.want)
		}
	}
}
