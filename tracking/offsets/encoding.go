package offsets

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// The binary encoding of a Set is
//
//	uvarint(number of ranges)
//	varint(Start) uvarint(End-Start)                 first range (zigzag, so any int64 fits)
//	uvarint(Start-previous End) uvarint(End-Start)   every further range
//
// Deltas keep a range of realistic Kafka offsets to a few bytes: a gap and
// a length of up to 16383 take two bytes each, and only the first start
// pays for the offset's magnitude. The encoding is canonical: a Set has
// exactly one encoding, and UnmarshalBinary accepts nothing else (no
// zero-length ranges, no touching ranges, no overlong varints), so equal
// sets have equal bytes.

// errMalformed is wrapped by every decoding error.
var errMalformed = errors.New("offsets: malformed set encoding")

// minRangeBytes is the smallest encoding of one range (two one-byte
// varints); it bounds how many ranges a buffer can honestly announce.
const minRangeBytes = 2

// AppendBinary appends the encoding of the set to b and returns the
// extended slice. It never fails, which lets a flush encode straight into
// a reused buffer.
func (s *Set) AppendBinary(b []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s.r)))
	var prevEnd int64
	for k, r := range s.r {
		if k == 0 {
			b = binary.AppendVarint(b, r.Start)
		} else {
			// Unsigned arithmetic: the true difference is positive and
			// fits in a uint64 even when the int64 subtraction would not.
			b = binary.AppendUvarint(b, uint64(r.Start)-uint64(prevEnd))
		}
		b = binary.AppendUvarint(b, uint64(r.End)-uint64(r.Start))
		prevEnd = r.End
	}
	return b
}

// MarshalBinary returns the encoding of the set. It implements
// encoding.BinaryMarshaler and never returns an error.
func (s Set) MarshalBinary() ([]byte, error) {
	return s.AppendBinary(nil), nil
}

// UnmarshalBinary replaces the contents of s with the set encoded in b. It
// returns an error, leaving s unchanged, when b is truncated, has trailing
// bytes, or describes ranges that are empty, touching, overlapping or
// beyond the int64 offsets. It never panics, and the memory it allocates is
// bounded by len(b) whatever count b announces.
func (s *Set) UnmarshalBinary(b []byte) error {
	count, n := uvarint(b)
	if n <= 0 {
		return fmt.Errorf("%w: range count: %s", errMalformed, varintProblem(n))
	}
	b = b[n:]
	if count > uint64(len(b)/minRangeBytes) {
		return fmt.Errorf("%w: %d ranges announced in %d bytes", errMalformed, count, len(b))
	}
	var out []Range
	if count > 0 {
		out = make([]Range, 0, count)
	}
	var prevEnd int64
	for k := range count {
		var start int64
		if k == 0 {
			v, n := varint(b)
			if n <= 0 {
				return fmt.Errorf("%w: range 0 start: %s", errMalformed, varintProblem(n))
			}
			start, b = v, b[n:]
		} else {
			gap, n := uvarint(b)
			if n <= 0 {
				return fmt.Errorf("%w: range %d gap: %s", errMalformed, k, varintProblem(n))
			}
			b = b[n:]
			if gap == 0 {
				return fmt.Errorf("%w: range %d touches the previous one", errMalformed, k)
			}
			if gap > uint64(math.MaxInt64)-uint64(prevEnd) {
				return fmt.Errorf("%w: range %d starts beyond the int64 offsets", errMalformed, k)
			}
			start = int64(uint64(prevEnd) + gap)
		}
		length, n := uvarint(b)
		if n <= 0 {
			return fmt.Errorf("%w: range %d length: %s", errMalformed, k, varintProblem(n))
		}
		b = b[n:]
		if length == 0 {
			return fmt.Errorf("%w: range %d is empty", errMalformed, k)
		}
		if length > uint64(math.MaxInt64)-uint64(start) {
			return fmt.Errorf("%w: range %d ends beyond the int64 offsets", errMalformed, k)
		}
		prevEnd = int64(uint64(start) + length)
		out = append(out, Range{Start: start, End: prevEnd})
	}
	if len(b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", errMalformed, len(b))
	}
	s.r = out
	return nil
}

// uvarint is binary.Uvarint that also rejects overlong encodings (a last
// byte of zero after the first), which keeps the encoding canonical.
func uvarint(b []byte) (uint64, int) {
	v, n := binary.Uvarint(b)
	if n > 1 && b[n-1] == 0 {
		return 0, -n
	}
	return v, n
}

// varint is the zigzag counterpart of uvarint.
func varint(b []byte) (int64, int) {
	ux, n := uvarint(b)
	if n <= 0 {
		return 0, n
	}
	x := int64(ux >> 1)
	if ux&1 != 0 {
		x = ^x
	}
	return x, n
}

func varintProblem(n int) string {
	if n == 0 {
		return "truncated"
	}
	return "overlong or overflowing varint"
}
