package keyrange

import (
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
)

// Space is the size of the hash space: hashes are 0 … Space-1.
const Space = 1 << 16

// Of returns the hash of a record: its key's, or, for a record without a
// key (nil), its offset's, so keyless records spread over the space.
func Of(key []byte, offset int64) uint16 {
	if key == nil {
		return OfOffset(offset)
	}
	h := fnv.New32a()
	_, _ = h.Write(key)
	s := h.Sum32()
	return uint16(s>>16) ^ uint16(s)
}

// OfOffset returns the hash of an offset (records without a key, and every
// record of a subscription without ordering).
func OfOffset(offset int64) uint16 {
	// splitmix64's finaliser: consecutive offsets land far apart.
	x := uint64(offset)
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return uint16(x)
}

// Range is the half-open hash range [Lo, Hi), 0 ≤ Lo < Hi ≤ Space.
type Range struct {
	Lo uint32 `json:"lo"`
	Hi uint32 `json:"hi"`
}

// Contains reports whether h is in r.
func (r Range) Contains(h uint16) bool { return uint32(h) >= r.Lo && uint32(h) < r.Hi }

// Len is the number of hashes in r.
func (r Range) Len() uint32 { return r.Hi - r.Lo }

// String is "lo-hi" with hi exclusive, as Parse reads it.
func (r Range) String() string {
	return strconv.FormatUint(uint64(r.Lo), 10) + "-" + strconv.FormatUint(uint64(r.Hi), 10)
}

func (r Range) valid() bool { return r.Lo < r.Hi && r.Hi <= Space }

// Set is a set of hashes as sorted, disjoint, non-adjacent ranges. The
// zero Set is empty. Sets are values: operations return new ones.
type Set []Range

// Full is the whole space.
func Full() Set { return Set{{0, Space}} }

// NewSet builds a Set from any ranges, merging overlaps. Invalid ranges
// (empty, reversed or beyond the space) are an error.
func NewSet(rs ...Range) (Set, error) {
	for _, r := range rs {
		if !r.valid() {
			return nil, fmt.Errorf("keyrange: invalid range %d-%d", r.Lo, r.Hi)
		}
	}
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b Range) int { return int(a.Lo) - int(b.Lo) })
	return normalise(s), nil
}

// normalise merges sorted ranges that overlap or touch.
func normalise(s []Range) Set {
	var out Set
	for _, r := range s {
		if n := len(out); n > 0 && r.Lo <= out[n-1].Hi {
			out[n-1].Hi = max(out[n-1].Hi, r.Hi)
			continue
		}
		out = append(out, r)
	}
	return out
}

// Contains reports whether h is in s.
func (s Set) Contains(h uint16) bool {
	// Sets are a handful of ranges: a scan beats a search.
	for _, r := range s {
		if uint32(h) < r.Lo {
			return false
		}
		if uint32(h) < r.Hi {
			return true
		}
	}
	return false
}

// IsFull reports whether s is the whole space.
func (s Set) IsFull() bool { return len(s) == 1 && s[0].Lo == 0 && s[0].Hi == Space }

// IsEmpty reports whether s holds no hash.
func (s Set) IsEmpty() bool { return len(s) == 0 }

// Len is the number of hashes in s.
func (s Set) Len() uint32 {
	var n uint32
	for _, r := range s {
		n += r.Len()
	}
	return n
}

// Equal reports whether s and o hold the same hashes.
func (s Set) Equal(o Set) bool { return slices.Equal(s, o) }

// Union returns the hashes in s or o.
func (s Set) Union(o Set) Set {
	all := append(slices.Clone(s), o...)
	slices.SortFunc(all, func(a, b Range) int { return int(a.Lo) - int(b.Lo) })
	return normalise(all)
}

// Intersect returns the hashes in both s and o.
func (s Set) Intersect(o Set) Set {
	var out Set
	i, j := 0, 0
	for i < len(s) && j < len(o) {
		lo, hi := max(s[i].Lo, o[j].Lo), min(s[i].Hi, o[j].Hi)
		if lo < hi {
			out = append(out, Range{lo, hi})
		}
		if s[i].Hi < o[j].Hi {
			i++
		} else {
			j++
		}
	}
	return out
}

// Minus returns the hashes in s but not in o.
func (s Set) Minus(o Set) Set {
	var out Set
	for _, r := range s {
		cur := r
		for _, x := range o {
			if x.Hi <= cur.Lo || x.Lo >= cur.Hi {
				continue
			}
			if x.Lo > cur.Lo {
				out = append(out, Range{cur.Lo, x.Lo})
			}
			if x.Hi >= cur.Hi {
				cur.Lo = cur.Hi
				break
			}
			cur.Lo = x.Hi
		}
		if cur.Lo < cur.Hi {
			out = append(out, cur)
		}
	}
	return out
}

// Covers reports whether every hash of o is in s.
func (s Set) Covers(o Set) bool { return o.Minus(s).IsEmpty() }

// Overlaps reports whether s and o share a hash.
func (s Set) Overlaps(o Set) bool { return !s.Intersect(o).IsEmpty() }

// String is the ranges joined by commas ("0-32768,49152-65536"), "" when
// empty; Parse reads it back.
func (s Set) String() string {
	parts := make([]string, len(s))
	for i, r := range s {
		parts[i] = r.String()
	}
	return strings.Join(parts, ",")
}

// ErrSyntax is wrapped by Parse's errors.
var ErrSyntax = errors.New("keyrange: bad range syntax")

// Parse reads what String writes.
func Parse(str string) (Set, error) {
	if str == "" {
		return nil, nil
	}
	var rs []Range
	for _, part := range strings.Split(str, ",") {
		lo, hi, ok := strings.Cut(part, "-")
		if !ok {
			return nil, fmt.Errorf("%w: %q", ErrSyntax, part)
		}
		l, err1 := strconv.ParseUint(lo, 10, 32)
		h, err2 := strconv.ParseUint(hi, 10, 32)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%w: %q", ErrSyntax, part)
		}
		rs = append(rs, Range{uint32(l), uint32(h)})
	}
	s, err := NewSet(rs...)
	if err != nil {
		return nil, err
	}
	if len(s) != len(rs) {
		return nil, fmt.Errorf("%w: %q: ranges overlap or are not sorted", ErrSyntax, str)
	}
	for i := range s {
		if s[i] != rs[i] {
			return nil, fmt.Errorf("%w: %q: ranges overlap or are not sorted", ErrSyntax, str)
		}
	}
	return s, nil
}

// Split cuts the space into n contiguous ranges of equal size (the first
// Space mod n one hash larger), in order. n must be 1 … Space.
func Split(n int) []Range {
	if n < 1 || n > Space {
		panic("keyrange: Split of " + strconv.Itoa(n))
	}
	out := make([]Range, n)
	size, extra := uint32(Space/n), uint32(Space%n)
	var lo uint32
	for i := range out {
		hi := lo + size
		if uint32(i) < extra {
			hi++
		}
		out[i] = Range{lo, hi}
		lo = hi
	}
	return out
}
