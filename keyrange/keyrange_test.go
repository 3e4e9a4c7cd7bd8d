package keyrange

import (
	"math/rand/v2"
	"testing"
)

func TestHashIsStable(t *testing.T) {
	// Hashes are persisted in assignments and tracking state: they must
	// never change between versions.
	for _, tc := range []struct {
		key    []byte
		offset int64
		want   uint16
	}{
		{[]byte("order-1"), 0, Of([]byte("order-1"), 99)},
		{[]byte(""), 7, Of([]byte{}, 8)},
	} {
		if got := Of(tc.key, tc.offset); got != tc.want {
			t.Errorf("Of(%q, %d) = %d, want %d (a key's hash must not depend on the offset)", tc.key, tc.offset, got, tc.want)
		}
	}
	if Of([]byte("a"), 0) != 0xe40c^0x292c {
		t.Errorf("Of(\"a\") = %#x; the FNV-1a fold changed", Of([]byte("a"), 0))
	}
	if Of(nil, 1) == Of(nil, 2) {
		t.Error("keyless records of consecutive offsets hash alike")
	}
}

func TestHashSpreadsEvenly(t *testing.T) {
	quarters := Split(4)
	counts := make([]int, 4)
	for i := range 40000 {
		h := Of([]byte("key-"+string(rune('a'+i%26))+itoa(i)), 0)
		for q, r := range quarters {
			if r.Contains(h) {
				counts[q]++
			}
		}
	}
	for q, n := range counts {
		if n < 9000 || n > 11000 {
			t.Errorf("quarter %d got %d of 40000 keys; want about 10000", q, n)
		}
	}
}

func itoa(i int) string {
	b := []byte{}
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

func TestSplitCoversTheSpaceInOrder(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 7, 1000} {
		rs := Split(n)
		s, err := NewSet(rs...)
		if err != nil || !s.IsFull() {
			t.Fatalf("Split(%d) = %v does not cover the space (%v)", n, rs, err)
		}
		for i := 1; i < len(rs); i++ {
			if rs[i].Lo != rs[i-1].Hi {
				t.Fatalf("Split(%d): ranges %v and %v are not contiguous", n, rs[i-1], rs[i])
			}
			if d := int(rs[i].Len()) - int(rs[0].Len()); d > 0 || d < -1 {
				t.Fatalf("Split(%d): uneven sizes %v", n, rs)
			}
		}
	}
}

func TestSetOperations(t *testing.T) {
	mk := func(rs ...Range) Set {
		s, err := NewSet(rs...)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a := mk(Range{0, 100}, Range{200, 300})
	b := mk(Range{50, 250})
	for _, tc := range []struct {
		name      string
		got, want Set
	}{
		{"union merges overlaps", a.Union(b), mk(Range{0, 300})},
		{"intersect", a.Intersect(b), mk(Range{50, 100}, Range{200, 250})},
		{"minus", a.Minus(b), mk(Range{0, 50}, Range{250, 300})},
		{"minus of the full space", Full().Minus(a), mk(Range{100, 200}, Range{300, Space})},
		{"adjacent ranges merge", mk(Range{0, 10}, Range{10, 20}), mk(Range{0, 20})},
	} {
		if !tc.got.Equal(tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if !a.Covers(mk(Range{10, 20})) || a.Covers(b) || !a.Overlaps(b) || a.Overlaps(mk(Range{100, 200})) {
		t.Error("Covers/Overlaps disagree with the sets")
	}
	if _, err := NewSet(Range{5, 5}); err == nil {
		t.Error("an empty range was accepted")
	}
	if _, err := NewSet(Range{0, Space + 1}); err == nil {
		t.Error("a range beyond the space was accepted")
	}
}

func TestParseReadsWhatStringWrites(t *testing.T) {
	for _, s := range []Set{nil, Full(), {{0, 1}, {5, 9}, {65535, 65536}}} {
		got, err := Parse(s.String())
		if err != nil || !got.Equal(s) {
			t.Errorf("Parse(%q) = %v, %v", s.String(), got, err)
		}
	}
	for _, bad := range []string{"x", "1-", "5-3", "0-10,5-20", "10-20,0-5", "0-70000"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

// FuzzSetAlgebra checks the set operations against a bitmap of the space.
func FuzzSetAlgebra(f *testing.F) {
	f.Add(uint64(1), uint8(3), uint8(2))
	f.Fuzz(func(t *testing.T, seed uint64, na, nb uint8) {
		rng := rand.New(rand.NewPCG(seed, seed^0x9e37))
		gen := func(n uint8) (Set, []bool) {
			bits := make([]bool, Space)
			var rs []Range
			for range n % 8 {
				lo := uint32(rng.IntN(Space))
				hi := lo + 1 + uint32(rng.IntN(Space-int(lo)))
				rs = append(rs, Range{lo, hi})
				for h := lo; h < hi; h++ {
					bits[h] = true
				}
			}
			s, err := NewSet(rs...)
			if err != nil {
				t.Fatal(err)
			}
			return s, bits
		}
		a, ab := gen(na)
		b, bb := gen(nb)
		u, in, mi := a.Union(b), a.Intersect(b), a.Minus(b)
		for h := range Space {
			hh := uint16(h)
			if a.Contains(hh) != ab[h] {
				t.Fatalf("%v.Contains(%d) wrong", a, h)
			}
			if u.Contains(hh) != (ab[h] || bb[h]) || in.Contains(hh) != (ab[h] && bb[h]) || mi.Contains(hh) != (ab[h] && !bb[h]) {
				t.Fatalf("algebra wrong at %d: a=%v b=%v", h, a, b)
			}
		}
	})
}
