package dispatcher

import (
	"testing"

	"github.com/keyhook/keyhook/keyrange"
	"github.com/keyhook/keyhook/subscription"
)

// A cursor's worker of a shared partition delivers the reader's ranges
// when its subscription shares; one that does not share is delivered
// whole by the sharer holding hash 0 and not at all by the others; a
// partition whole (or not known shared) is whole for every cursor, and
// only the holder of hash 0 commits the reader group's offset.
func TestCursorRangesFollowTheReadersShareAndHashZero(t *testing.T) {
	sub := func(o subscription.Ordering, sh subscription.Sharing) *group {
		s := &subscription.Subscription{ID: "s", Topics: []string{"t"}, Ordering: o, Sharing: sh}
		s.Normalize()
		return &group{sub: s}
	}
	shares := sub(subscription.OrderKey, "")
	off := sub(subscription.OrderKey, subscription.SharingOff)
	strict := sub(subscription.OrderPartition, "")
	if !shares.sub.Shares() || off.sub.Shares() || strict.sub.Shares() {
		t.Fatal("the subscriptions do not share as the test means")
	}
	split := keyrange.Split(3)
	low, high := keyrange.Set{split[0]}, keyrange.Set{split[1], split[2]}
	whole, unknown, lowP, highP := topicPartition{"t", 0}, topicPartition{"t", 1}, topicPartition{"t", 2}, topicPartition{"t", 3}
	s := newReaderShares()
	s.ranges[whole] = keyrange.Full()
	s.ranges[lowP] = low
	s.ranges[highP] = high

	for _, c := range []struct {
		name string
		g    *group
		tp   topicPartition
		want keyrange.Set
		ok   bool
	}{
		{"sharing, whole partition", shares, whole, keyrange.Full(), true},
		{"sharing, partition without ranges", shares, unknown, keyrange.Full(), true},
		{"sharing, range with hash 0", shares, lowP, low, true},
		{"sharing, range without hash 0", shares, highP, high, true},
		{"sharing off, whole partition", off, whole, keyrange.Full(), true},
		{"sharing off, range with hash 0", off, lowP, keyrange.Full(), true},
		{"sharing off, range without hash 0", off, highP, nil, false},
		{"ordering partition, range with hash 0", strict, lowP, keyrange.Full(), true},
		{"ordering partition, range without hash 0", strict, highP, nil, false},
	} {
		got, ok := s.cursorRanges(c.g, c.tp)
		if ok != c.ok || (ok && !got.Equal(c.want)) {
			t.Errorf("%s: cursorRanges = %v, %v; want %v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
	for tp, want := range map[topicPartition]bool{whole: true, unknown: true, lowP: true, highP: false} {
		if got := s.commits(tp); got != want {
			t.Errorf("commits(%v) = %v, want %v", tp, got, want)
		}
	}
}
