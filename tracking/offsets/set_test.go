package offsets

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// setOf builds a set straight from ranges that already satisfy the Set
// invariants, so a test's starting state does not depend on Add.
func setOf(t testing.TB, rs ...Range) *Set {
	t.Helper()
	s := &Set{r: slices.Clone(rs)}
	checkInvariants(t, s)
	return s
}

// checkInvariants fails the test unless s holds sorted, non-empty,
// disjoint, non-touching ranges.
func checkInvariants(t testing.TB, s *Set) {
	t.Helper()
	for k, r := range s.r {
		if r.Start >= r.End {
			t.Fatalf("range %d %+v is empty or inverted (set %v)", k, r, s.r)
		}
		if k > 0 && s.r[k-1].End >= r.Start {
			t.Fatalf("ranges %d %+v and %d %+v overlap or touch (set %v)", k-1, s.r[k-1], k, r, s.r)
		}
	}
}

func TestAddMergesWithNeighbours(t *testing.T) {
	base := []Range{{10, 20}, {30, 40}, {50, 60}}
	tests := []struct {
		name       string
		start, end int64
		want       []Range
	}{
		{"empty interval is ignored", 25, 25, base},
		{"inverted interval is ignored", 26, 24, base},
		{"below everything stays apart", 0, 5, []Range{{0, 5}, {10, 20}, {30, 40}, {50, 60}}},
		{"above everything stays apart", 70, 80, []Range{{10, 20}, {30, 40}, {50, 60}, {70, 80}}},
		{"in a gap stays apart", 22, 28, []Range{{10, 20}, {22, 28}, {30, 40}, {50, 60}}},
		{"touching the end extends right", 20, 25, []Range{{10, 25}, {30, 40}, {50, 60}}},
		{"touching the start extends left", 25, 30, []Range{{10, 20}, {25, 40}, {50, 60}}},
		{"overlapping the start extends left", 5, 15, []Range{{5, 20}, {30, 40}, {50, 60}}},
		{"overlapping the end extends right", 35, 45, []Range{{10, 20}, {30, 45}, {50, 60}}},
		{"inside a range changes nothing", 32, 38, base},
		{"equal to a range changes nothing", 30, 40, base},
		{"covering a range swallows it", 25, 45, []Range{{10, 20}, {25, 45}, {50, 60}}},
		{"filling a gap exactly bridges two", 20, 30, []Range{{10, 40}, {50, 60}}},
		{"overlapping two bridges them", 15, 35, []Range{{10, 40}, {50, 60}}},
		{"spanning all collapses to one", 0, 100, []Range{{0, 100}}},
		{"touching first and last collapses all", 20, 50, []Range{{10, 60}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := setOf(t, base...)
			s.Add(tt.start, tt.end)
			checkInvariants(t, s)
			if diff := cmp.Diff(tt.want, s.r); diff != "" {
				t.Errorf("Add(%d, %d) ranges (-want +got):\n%s", tt.start, tt.end, diff)
			}
		})
	}
}

func TestAddOnEmptySetCreatesOneRange(t *testing.T) {
	var s Set
	s.Add(-3, 4)
	if diff := cmp.Diff([]Range{{-3, 4}}, s.Ranges()); diff != "" {
		t.Errorf("ranges (-want +got):\n%s", diff)
	}
}

func TestAddOffsetMergesWithNeighbours(t *testing.T) {
	base := []Range{{10, 20}, {21, 30}, {40, 50}}
	tests := []struct {
		name string
		o    int64
		want []Range
	}{
		{"next in order extends the last range", 50, []Range{{10, 20}, {21, 30}, {40, 51}}},
		{"just below the first extends it down", 9, []Range{{9, 20}, {21, 30}, {40, 50}}},
		{"far below the first stands alone", 0, []Range{{0, 1}, {10, 20}, {21, 30}, {40, 50}}},
		{"far above the last stands alone", 60, []Range{{10, 20}, {21, 30}, {40, 50}, {60, 61}}},
		{"the only hole between two bridges them", 20, []Range{{10, 30}, {40, 50}}},
		{"touching the end of a range extends it", 30, []Range{{10, 20}, {21, 31}, {40, 50}}},
		{"touching the start of a range extends it", 39, []Range{{10, 20}, {21, 30}, {39, 50}}},
		{"in the middle of a gap stands alone", 35, []Range{{10, 20}, {21, 30}, {35, 36}, {40, 50}}},
		{"already present at a start changes nothing", 21, base},
		{"already present inside changes nothing", 45, base},
		{"already present at the last offset changes nothing", 49, base},
		{"MaxInt64 cannot be represented and is ignored", math.MaxInt64, base},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := setOf(t, base...)
			s.AddOffset(tt.o)
			checkInvariants(t, s)
			if diff := cmp.Diff(tt.want, s.r); diff != "" {
				t.Errorf("AddOffset(%d) ranges (-want +got):\n%s", tt.o, diff)
			}
		})
	}
}

func TestAddOffsetExtendingARangeDoesNotAllocate(t *testing.T) {
	s := setOf(t, Range{0, 10}, Range{20, 30}, Range{40, 50})
	next, low := int64(50), int64(19)
	allocs := testing.AllocsPerRun(100, func() {
		s.AddOffset(next) // extends the last range up
		next++
		if low > 11 {
			s.AddOffset(low) // extends the middle range down
			low--
		}
	})
	if allocs != 0 {
		t.Errorf("AddOffset allocated %v times per run; want 0", allocs)
	}
}

func TestContains(t *testing.T) {
	s := setOf(t, Range{10, 20}, Range{30, 31})
	tests := []struct {
		o    int64
		want bool
	}{
		{math.MinInt64, false}, {9, false}, {10, true}, {15, true}, {19, true}, {20, false},
		{29, false}, {30, true}, {31, false}, {math.MaxInt64, false},
	}
	for _, tt := range tests {
		if got := s.Contains(tt.o); got != tt.want {
			t.Errorf("Contains(%d) = %v; want %v", tt.o, got, tt.want)
		}
	}
	var empty Set
	if empty.Contains(0) {
		t.Errorf("empty set Contains(0) = true")
	}
}

func TestWatermarkIsLowestMissingOffsetAtOrAboveFrom(t *testing.T) {
	s := setOf(t, Range{10, 20}, Range{21, 30})
	tests := []struct {
		name string
		from int64
		want int64
	}{
		{"below every range is from itself", 5, 5},
		{"at the start of a range is its end", 10, 20},
		{"inside a range is its end", 15, 20},
		{"on a one-offset hole is the hole", 20, 20},
		{"just past the hole is the next range end", 21, 30},
		{"above every range is from itself", 31, 31},
		{"at a range end is from itself", 30, 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := s.Watermark(tt.from); got != tt.want {
				t.Errorf("Watermark(%d) = %d; want %d", tt.from, got, tt.want)
			}
		})
	}
	var empty Set
	if got := empty.Watermark(7); got != 7 {
		t.Errorf("empty set Watermark(7) = %d; want 7", got)
	}
}

func TestTrimBelowRemovesLowerOffsets(t *testing.T) {
	base := []Range{{10, 20}, {30, 40}, {50, 60}}
	tests := []struct {
		name string
		o    int64
		want []Range
	}{
		{"below everything changes nothing", 5, base},
		{"at the first start changes nothing", 10, base},
		{"inside a range cuts it", 15, []Range{{15, 20}, {30, 40}, {50, 60}}},
		{"at a range end drops it whole", 20, []Range{{30, 40}, {50, 60}}},
		{"in a gap drops what is below", 25, []Range{{30, 40}, {50, 60}}},
		{"cutting a later range drops earlier ones", 35, []Range{{35, 40}, {50, 60}}},
		{"on the last offset keeps just it", 59, []Range{{59, 60}}},
		{"at the last end empties the set", 60, []Range{}},
		{"above everything empties the set", 100, []Range{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := setOf(t, base...)
			s.TrimBelow(tt.o)
			checkInvariants(t, s)
			if diff := cmp.Diff(tt.want, s.r); diff != "" {
				t.Errorf("TrimBelow(%d) ranges (-want +got):\n%s", tt.o, diff)
			}
		})
	}
}

func TestCountLenAndRanges(t *testing.T) {
	s := setOf(t, Range{10, 20}, Range{30, 31})
	if got := s.Len(); got != 2 {
		t.Errorf("Len() = %d; want 2", got)
	}
	if got := s.Count(); got != 11 {
		t.Errorf("Count() = %d; want 11", got)
	}
	rs := s.Ranges()
	rs[0].Start = 0 // the copy must not alias the set
	if diff := cmp.Diff([]Range{{10, 20}, {30, 31}}, s.Ranges()); diff != "" {
		t.Errorf("Ranges after mutating a copy (-want +got):\n%s", diff)
	}
	var empty Set
	if empty.Ranges() != nil || empty.Len() != 0 || empty.Count() != 0 {
		t.Errorf("empty set: Ranges %v, Len %d, Count %d; want nil, 0, 0", empty.Ranges(), empty.Len(), empty.Count())
	}
	huge := setOf(t, Range{math.MinInt64, 0}, Range{1, math.MaxInt64})
	if got := huge.Count(); got != math.MaxInt64 {
		t.Errorf("Count() of a set larger than MaxInt64 = %d; want it to saturate", got)
	}
}

func TestUnionMergesOverlappingAndTouchingRanges(t *testing.T) {
	tests := []struct {
		name string
		a, b []Range
		want []Range
	}{
		{"empty with empty", nil, nil, nil},
		{"empty takes the other", nil, []Range{{1, 2}}, []Range{{1, 2}}},
		{"other empty changes nothing", []Range{{1, 2}}, nil, []Range{{1, 2}}},
		{"interleaved stay apart", []Range{{0, 2}, {10, 12}}, []Range{{5, 7}, {20, 22}}, []Range{{0, 2}, {5, 7}, {10, 12}, {20, 22}}},
		{"touching merge", []Range{{0, 5}}, []Range{{5, 10}}, []Range{{0, 10}}},
		{"one bridges the other's ranges", []Range{{0, 5}, {10, 15}}, []Range{{3, 12}}, []Range{{0, 15}}},
		{"contained changes nothing", []Range{{0, 100}}, []Range{{3, 5}, {50, 60}}, []Range{{0, 100}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := setOf(t, tt.a...), setOf(t, tt.b...)
			a.Union(b)
			checkInvariants(t, a)
			if diff := cmp.Diff(tt.want, a.Ranges()); diff != "" {
				t.Errorf("Union ranges (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.b, b.Ranges()); diff != "" {
				t.Errorf("Union changed its argument (-want +got):\n%s", diff)
			}
		})
	}
	s := setOf(t, Range{1, 3}, Range{5, 8})
	s.Union(s)
	s.Union(nil)
	if diff := cmp.Diff([]Range{{1, 3}, {5, 8}}, s.Ranges()); diff != "" {
		t.Errorf("Union with itself and nil (-want +got):\n%s", diff)
	}
}

func TestCloneIsIndependent(t *testing.T) {
	s := setOf(t, Range{1, 3})
	c := s.Clone()
	c.AddOffset(3)
	s.AddOffset(10)
	if diff := cmp.Diff([]Range{{1, 3}, {10, 11}}, s.Ranges()); diff != "" {
		t.Errorf("original (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]Range{{1, 4}}, c.Ranges()); diff != "" {
		t.Errorf("clone (-want +got):\n%s", diff)
	}
}

func TestStringUsesInclusiveEnds(t *testing.T) {
	tests := []struct {
		rs   []Range
		want string
	}{
		{nil, ""},
		{[]Range{{12, 13}}, "12"},
		{[]Range{{5, 10}, {12, 13}}, "5-9,12"},
		{[]Range{{-5, -1}, {0, 2}}, "-5--2,0-1"},
	}
	for _, tt := range tests {
		if got := setOf(t, tt.rs...).String(); got != tt.want {
			t.Errorf("String() of %v = %q; want %q", tt.rs, got, tt.want)
		}
	}
}

// model is the obviously correct set the property and fuzz tests compare
// Set against.
type model map[int64]bool

func (m model) add(start, end int64) {
	for o := start; o < end; o++ {
		m[o] = true
	}
}

func (m model) trimBelow(o int64) {
	for k := range m {
		if k < o {
			delete(m, k)
		}
	}
}

func (m model) watermark(from int64) int64 {
	for m[from] {
		from++
	}
	return from
}

func (m model) ranges() []Range {
	keys := make([]int64, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var rs []Range
	for _, k := range keys {
		if n := len(rs); n > 0 && rs[n-1].End == k {
			rs[n-1].End++
			continue
		}
		rs = append(rs, Range{k, k + 1})
	}
	return rs
}

// checkAgainstModel fails unless s and m hold the same offsets and agree on
// every query over [lo, hi).
func checkAgainstModel(t testing.TB, s *Set, m model, lo, hi int64) {
	t.Helper()
	checkInvariants(t, s)
	if diff := cmp.Diff(m.ranges(), s.Ranges()); diff != "" {
		t.Fatalf("ranges differ from the model (-want +got):\n%s", diff)
	}
	if got, want := s.Count(), int64(len(m)); got != want {
		t.Fatalf("Count() = %d; model has %d", got, want)
	}
	for o := lo; o < hi; o++ {
		if got := s.Contains(o); got != m[o] {
			t.Fatalf("Contains(%d) = %v; model says %v", o, got, m[o])
		}
		if got, want := s.Watermark(o), m.watermark(o); got != want {
			t.Fatalf("Watermark(%d) = %d; model says %d", o, got, want)
		}
	}
}

func TestSetMatchesModelUnderRandomOperations(t *testing.T) {
	const domain = 300
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, seed*7919))
		var s Set
		m := model{}
		for step := range 400 {
			switch rng.IntN(10) {
			case 0, 1, 2, 3, 4:
				o := rng.Int64N(domain)
				s.AddOffset(o)
				m.add(o, o+1)
			case 5, 6:
				a := rng.Int64N(domain)
				b := a + rng.Int64N(20) - 3 // sometimes empty or inverted
				s.Add(a, b)
				m.add(a, b)
			case 7:
				if rng.IntN(4) == 0 { // trims are rarer than acks
					o := rng.Int64N(domain)
					s.TrimBelow(o)
					m.trimBelow(o)
				}
			case 8:
				var other Set
				for range rng.IntN(5) {
					a := rng.Int64N(domain)
					b := a + rng.Int64N(10)
					other.Add(a, b)
					m.add(a, b)
				}
				s.Union(&other)
			case 9:
				var back Set
				if err := back.UnmarshalBinary(s.AppendBinary(nil)); err != nil {
					t.Fatalf("seed %d step %d: decode own encoding: %v", seed, step, err)
				}
				s = back
			}
			checkAgainstModel(t, &s, m, -2, domain+25)
		}
	}
}
