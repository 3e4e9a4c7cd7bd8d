package offsets

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestEncodingGoldenVectors(t *testing.T) {
	tests := []struct {
		name string
		rs   []Range
		want []byte
	}{
		{"empty set is one zero byte", nil, []byte{0x00}},
		// count 2; zigzag(5)=10, len 5; gap 12-10=2, len 1.
		{"two ranges", []Range{{5, 10}, {12, 13}}, []byte{0x02, 0x0a, 0x05, 0x02, 0x01}},
		// zigzag(-1)=1.
		{"negative first start", []Range{{-1, 1}}, []byte{0x01, 0x01, 0x02}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := setOf(t, tt.rs...)
			got, err := s.MarshalBinary()
			if err != nil {
				t.Fatalf("MarshalBinary: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("encoding (-want +got):\n%s", diff)
			}
			var back Set
			if err := back.UnmarshalBinary(got); err != nil {
				t.Fatalf("UnmarshalBinary: %v", err)
			}
			if diff := cmp.Diff(tt.rs, back.Ranges()); diff != "" {
				t.Errorf("decoded ranges (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAppendBinaryKeepsThePrefix(t *testing.T) {
	s := setOf(t, Range{5, 10})
	got := s.AppendBinary([]byte("hdr"))
	if diff := cmp.Diff([]byte{'h', 'd', 'r', 0x01, 0x0a, 0x05}, got); diff != "" {
		t.Errorf("AppendBinary (-want +got):\n%s", diff)
	}
}

func TestEncodingStaysSmallForRealisticOffsets(t *testing.T) {
	// A busy partition deep into its log: offsets around 2^40, holes of up
	// to a few hundred offsets between acked runs of up to a few thousand.
	rng := rand.New(rand.NewPCG(1, 2))
	var s Set
	next := int64(1) << 40
	for range 10_000 {
		next += 1 + rng.Int64N(300)
		end := next + 1 + rng.Int64N(5000)
		s.Add(next, end)
		next = end
	}
	b := s.AppendBinary(nil)
	if perRange := float64(len(b)) / float64(s.Len()); perRange > 10 {
		t.Errorf("encoding takes %.2f bytes per range; want at most 10", perRange)
	}

	// Even adversarial ranges (largest gap and length) stay far under the
	// 64 bytes per gap the state budget allows.
	worst := setOf(t, Range{math.MinInt64, math.MinInt64 + 1}, Range{math.MaxInt64 - 1, math.MaxInt64})
	if n := len(worst.AppendBinary(nil)); n > 1+2*20 {
		t.Errorf("worst-case two-range encoding takes %d bytes; want at most %d", n, 1+2*20)
	}
}

func TestUnmarshalRejectsMalformedInputAndKeepsTheSet(t *testing.T) {
	uv := func(vs ...uint64) []byte {
		var b []byte
		for _, v := range vs {
			b = binary.AppendUvarint(b, v)
		}
		return b
	}
	tests := []struct {
		name string
		in   []byte
	}{
		{"nothing at all", nil},
		{"count truncated", []byte{0x80}},
		{"count overlong", []byte{0x80, 0x00}},
		{"count overflowing 64 bits", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}},
		{"hostile count", uv(1<<62, 2, 1)},
		{"count above what the bytes can hold", uv(3, 2, 1, 1, 1)},
		{"first start truncated", []byte{0x01, 0x80, 0x00}},
		{"first length missing", uv(1, 10, 5)[:2]},
		{"zero-length range", uv(1, 10, 0)},
		{"touching ranges", uv(2, 10, 5, 0, 3)},
		{"start past MaxInt64", append(append(uv(2), binary.AppendVarint(nil, math.MaxInt64-3)...), uv(1, math.MaxUint64>>1, 1)...)},
		{"end past MaxInt64", append(append(uv(1), binary.AppendVarint(nil, math.MaxInt64-3)...), uv(4)...)},
		{"trailing bytes", append(uv(1, 10, 5), 0x00)},
		{"overlong length", []byte{0x01, 0x0a, 0x85, 0x00}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := setOf(t, Range{1, 2})
			err := s.UnmarshalBinary(tt.in)
			if !errors.Is(err, errMalformed) {
				t.Fatalf("UnmarshalBinary(%x) error = %v; want errMalformed", tt.in, err)
			}
			if diff := cmp.Diff([]Range{{1, 2}}, s.Ranges()); diff != "" {
				t.Errorf("set changed by a failed decode (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUnmarshalReplacesExistingContents(t *testing.T) {
	s := setOf(t, Range{100, 200})
	if err := s.UnmarshalBinary([]byte{0x00}); err != nil {
		t.Fatalf("UnmarshalBinary: %v", err)
	}
	if s.Len() != 0 {
		t.Errorf("set after decoding the empty set: %v; want empty", s.Ranges())
	}
}
