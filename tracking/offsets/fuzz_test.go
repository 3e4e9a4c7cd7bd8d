package offsets

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzSetOps reads an operation sequence from the fuzzer's bytes, applies
// it to a Set and to a map model, and checks after every step that the two
// agree and that the Set's invariants hold. Offsets stay in a small domain
// so that merges, bridges and trims happen constantly.
func FuzzSetOps(f *testing.F) {
	f.Add([]byte{0, 5, 0, 7, 0, 6})                       // bridge a one-offset hole
	f.Add([]byte{1, 10, 5, 1, 20, 5, 1, 14, 7})           // Add bridging two ranges
	f.Add([]byte{0, 3, 0, 4, 2, 4, 0, 9, 3, 0})           // trim then re-add
	f.Add([]byte{1, 0, 50, 4, 10, 5, 4, 40, 5, 2, 45, 3}) // union overlapping
	f.Fuzz(func(t *testing.T, ops []byte) {
		const domain = 64
		var s Set
		m := model{}
		for len(ops) >= 2 {
			op, a := ops[0]%5, int64(ops[1]%domain)
			ops = ops[2:]
			switch op {
			case 0:
				s.AddOffset(a)
				m.add(a, a+1)
			case 1:
				if len(ops) == 0 {
					return
				}
				b := a + int64(ops[0]%24) - 4 // may be empty or inverted
				ops = ops[1:]
				s.Add(a, b)
				m.add(a, b)
			case 2:
				s.TrimBelow(a)
				m.trimBelow(a)
			case 3:
				// Round-trip through the encoding mid-sequence.
				var back Set
				if err := back.UnmarshalBinary(s.AppendBinary(nil)); err != nil {
					t.Fatalf("decode own encoding of %v: %v", s.Ranges(), err)
				}
				s = back
			case 4:
				if len(ops) == 0 {
					return
				}
				var other Set
				b := a + int64(ops[0]%16)
				ops = ops[1:]
				other.Add(a, b)
				other.AddOffset(b + 2)
				m.add(a, b)
				m.add(b+2, b+3)
				s.Union(&other)
			}
			checkAgainstModel(t, &s, m, -1, domain+30)
		}
	})
}

// FuzzUnmarshal checks that decoding arbitrary bytes never panics and that
// whatever it accepts is a valid set whose encoding is exactly the input
// (the encoding is canonical) and decodes to the same set again.
func FuzzUnmarshal(f *testing.F) {
	f.Add([]byte{0x00})
	f.Add([]byte{0x02, 0x0a, 0x05, 0x02, 0x01})
	f.Add([]byte{0x01, 0x01, 0x02})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f, 0x00, 0x01})
	f.Add([]byte{0x02, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x01, 0x01, 0x01})
	f.Fuzz(func(t *testing.T, in []byte) {
		var s Set
		if err := s.UnmarshalBinary(in); err != nil {
			return
		}
		checkInvariants(t, &s)
		out := s.AppendBinary(nil)
		if !bytes.Equal(in, out) {
			t.Fatalf("re-encoding %x gave %x; the encoding must be canonical", in, out)
		}
		var again Set
		if err := again.UnmarshalBinary(out); err != nil {
			t.Fatalf("decode re-encoding %x: %v", out, err)
		}
		if diff := cmp.Diff(s.Ranges(), again.Ranges()); diff != "" {
			t.Fatalf("round trip changed the set (-want +got):\n%s", diff)
		}
	})
}
