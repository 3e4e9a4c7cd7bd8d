package offsets

import (
	"math"
	"slices"
	"strconv"
	"strings"
)

// Range is the half-open interval of offsets [Start, End). Every Range
// returned by a Set has Start < End.
type Range struct {
	Start int64 `json:"start"`
	End   int64 `json:"end"`
}

// Set is a set of int64 offsets stored as sorted, disjoint, non-adjacent
// ranges, so a run of acked records costs one Range however long it is.
// The zero value is an empty set ready to use. A Set is not safe for
// concurrent use.
//
// Because ranges are half-open, math.MaxInt64 itself can never be a member;
// Kafka offsets never come near it.
type Set struct {
	// r is sorted by Start; r[k].End < r[k+1].Start (strictly: touching
	// ranges are merged) and r[k].Start < r[k].End.
	r []Range
}

// after returns the index of the first range whose End is greater than o:
// the only range that can contain o, or else the first range above it.
func (s *Set) after(o int64) int {
	lo, hi := 0, len(s.r)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s.r[m].End <= o {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// touching returns the index of the first range whose End is at least o,
// that is the first range that overlaps or touches an interval starting
// at o.
func (s *Set) touching(o int64) int {
	lo, hi := 0, len(s.r)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s.r[m].End < o {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// beyond returns the index of the first range whose Start is greater than
// o: ranges from there on can neither overlap nor touch an interval ending
// at o.
func (s *Set) beyond(o int64) int {
	lo, hi := 0, len(s.r)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s.r[m].Start <= o {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// Add adds the offsets [start, end) to the set, merging every range it
// overlaps or touches. It does nothing when start >= end.
func (s *Set) Add(start, end int64) {
	if start >= end {
		return
	}
	i, j := s.touching(start), s.beyond(end)
	if i == j {
		s.r = slices.Insert(s.r, i, Range{Start: start, End: end})
		return
	}
	// Ranges i..j-1 overlap or touch [start, end): they collapse into r[i].
	start = min(start, s.r[i].Start)
	end = max(end, s.r[j-1].End)
	s.r[i] = Range{Start: start, End: end}
	s.r = slices.Delete(s.r, i+1, j)
}

// AddOffset adds one offset to the set. It is the hot path, called once per
// acked record: a binary search, then at most one insertion or deletion in
// the range slice. Extending an existing range never allocates. Adding
// math.MaxInt64 does nothing (see Set).
func (s *Set) AddOffset(o int64) {
	if o == math.MaxInt64 {
		return
	}
	n := len(s.r)
	// Acks mostly arrive in order just above the newest range.
	if n > 0 && s.r[n-1].End == o {
		s.r[n-1].End++
		return
	}
	i := s.after(o)
	if i < n && s.r[i].Start <= o {
		return
	}
	// o lies in the gap between r[i-1] and r[i].
	joinPrev := i > 0 && s.r[i-1].End == o
	joinNext := i < n && s.r[i].Start == o+1
	switch {
	case joinPrev && joinNext:
		s.r[i-1].End = s.r[i].End
		s.r = slices.Delete(s.r, i, i+1)
	case joinPrev:
		s.r[i-1].End = o + 1
	case joinNext:
		s.r[i].Start = o
	default:
		s.r = slices.Insert(s.r, i, Range{Start: o, End: o + 1})
	}
}

// Contains reports whether o is in the set.
func (s *Set) Contains(o int64) bool {
	i := s.after(o)
	return i < len(s.r) && s.r[i].Start <= o
}

// Watermark returns the lowest offset at or above from that is not in the
// set: from itself, or the end of the range that holds from.
func (s *Set) Watermark(from int64) int64 {
	i := s.after(from)
	if i < len(s.r) && s.r[i].Start <= from {
		// Ranges never touch, so the end of this one is not a member.
		return s.r[i].End
	}
	return from
}

// TrimBelow removes every offset lower than o, cutting the range that
// straddles o. The watermark's owner calls it as the watermark moves up so
// the set only holds offsets that still matter.
func (s *Set) TrimBelow(o int64) {
	i := s.after(o)
	if i < len(s.r) && s.r[i].Start < o {
		s.r[i].Start = o
	}
	if i > 0 {
		// Shift down rather than reslice, so the backing array is reused
		// instead of drifting forward and reallocating as ranges come and go.
		s.r = s.r[:copy(s.r, s.r[i:])]
	}
}

// Ranges returns a copy of the set's ranges in ascending order, or nil when
// the set is empty.
func (s *Set) Ranges() []Range {
	if len(s.r) == 0 {
		return nil
	}
	return slices.Clone(s.r)
}

// Len returns the number of ranges in the set, which is what its memory and
// encoded size are proportional to.
func (s *Set) Len() int { return len(s.r) }

// Count returns the number of offsets in the set. It saturates at
// math.MaxInt64 for sets larger than that.
func (s *Set) Count() int64 {
	var c uint64
	for _, r := range s.r {
		c += uint64(r.End) - uint64(r.Start)
		if c > math.MaxInt64 {
			return math.MaxInt64
		}
	}
	return int64(c)
}

// Union adds every offset of o to s. A nil o is an empty set.
func (s *Set) Union(o *Set) {
	if o == nil || len(o.r) == 0 {
		return
	}
	if len(s.r) == 0 {
		s.r = slices.Clone(o.r)
		return
	}
	// A linear merge of two sorted lists; o may be s itself.
	out := make([]Range, 0, len(s.r)+len(o.r))
	a, b := s.r, o.r
	for len(a) > 0 || len(b) > 0 {
		var next Range
		if len(b) == 0 || (len(a) > 0 && a[0].Start <= b[0].Start) {
			next, a = a[0], a[1:]
		} else {
			next, b = b[0], b[1:]
		}
		if k := len(out) - 1; k >= 0 && next.Start <= out[k].End {
			out[k].End = max(out[k].End, next.End)
			continue
		}
		out = append(out, next)
	}
	s.r = out
}

// Clone returns an independent copy of the set.
func (s *Set) Clone() *Set {
	return &Set{r: slices.Clone(s.r)}
}

// String returns the set in human form with inclusive ends, such as
// "5-9,12" for the offsets 5 through 9 and 12. The empty set is "".
func (s *Set) String() string {
	var b strings.Builder
	var buf [48]byte
	for k, r := range s.r {
		if k > 0 {
			b.WriteByte(',')
		}
		num := strconv.AppendInt(buf[:0], r.Start, 10)
		if r.End-1 != r.Start {
			num = append(num, '-')
			num = strconv.AppendInt(num, r.End-1, 10)
		}
		b.Write(num)
	}
	return b.String()
}
