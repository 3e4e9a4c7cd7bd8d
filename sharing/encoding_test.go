package sharing

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keyhook/keyhook/keyrange"
)

func TestRangesRoundTrip(t *testing.T) {
	for _, a := range []Assignment{
		{},
		asg(t, "t/0=0-65536"),
		asg(t, "t/0=0-1", "t/7=5-9,10-65536", "u/2147483647=0-21846", "/0=4-5"),
	} {
		b := appendRanges(nil, a)
		got, err := decodeRanges(b)
		if err != nil {
			t.Fatalf("decode %v: %v", a, err)
		}
		if diff := cmp.Diff(a, got); diff != "" {
			t.Errorf("round trip (-want +got):\n%s", diff)
		}
	}
}

// uv builds ranges bytes by hand: the version, then unsigned varints.
func uv(version byte, nums ...uint64) []byte {
	b := []byte{version}
	for _, n := range nums {
		b = binary.AppendUvarint(b, n)
	}
	return b
}

func TestDecodeRangesRejectsWhatItDoesNotWrite(t *testing.T) {
	topic := func(b []byte, name string) []byte {
		b = binary.AppendUvarint(b, uint64(len(name)))
		return append(b, name...)
	}
	valid := appendRanges(nil, asg(t, "t/0=0-10"))
	for name, b := range map[string][]byte{
		"empty":                 nil,
		"unknown version":       uv(2, 0),
		"truncated":             valid[:len(valid)-1],
		"trailing byte":         append(append([]byte{}, valid...), 0),
		"huge topic count":      uv(1, 1<<40),
		"huge string":           uv(1, 1, 1<<40),
		"topic without parts":   append(topic(uv(1, 1), "t"), 0),
		"partition over int32":  binary.AppendUvarint(append(topic(uv(1, 1), "t"), 1), 1<<31),
		"partition w/o ranges":  append(append(topic(uv(1, 1), "t"), 1), 0, 0),
		"empty range":           append(append(topic(uv(1, 1), "t"), 1), 0, 1, 5, 5),
		"range beyond space":    binary.AppendUvarint(append(append(topic(uv(1, 1), "t"), 1), 0, 1, 0), 65537),
		"touching ranges":       append(append(topic(uv(1, 1), "t"), 1), 0, 2, 0, 5, 5, 9),
		"unsorted ranges":       append(append(topic(uv(1, 1), "t"), 1), 0, 2, 6, 9, 0, 5),
		"repeated partition":    append(append(topic(uv(1, 1), "t"), 2), 0, 1, 0, 5, 0, 1, 0, 5),
		"repeated topic":        append(topic(append(topic(uv(1, 2), "t"), 1, 0, 1, 0, 5), "t"), 1, 0, 1, 0, 5),
		"unsorted topics":       append(topic(append(topic(uv(1, 2), "u"), 1, 0, 1, 0, 5), "t"), 1, 0, 1, 0, 5),
		"overlong varint":       {1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01},
		"longer number form":    {1, 0x80, 0x00},
		"unsorted partitions":   append(append(topic(uv(1, 1), "t"), 2), 3, 1, 0, 5, 1, 1, 0, 5),
		"range count too large": append(append(topic(uv(1, 1), "t"), 1), 0, 100, 0, 5),
	} {
		t.Run(name, func(t *testing.T) {
			a, err := decodeRanges(b)
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("decode %x = %v, %v; want ErrMalformed", b, a, err)
			}
		})
	}
}

func TestMetadataRoundTrip(t *testing.T) {
	owned := asg(t, "a/0=0-65536", "a/3=100-200,300-400", "b/1=0-5")
	b := encodeMetadata([]string{"a", "b", "c"}, owned, 7)
	got, err := decodeMetadata("m", b)
	if err != nil {
		t.Fatal(err)
	}
	want := Member{ID: "m", Topics: []string{"a", "b", "c"}, Owned: owned, Generation: 7}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	// What franz-go reads must agree: the owned partitions are listed.
	var meta kmsg.ConsumerMemberMetadata
	if err := meta.ReadFrom(b); err != nil {
		t.Fatal(err)
	}
	if len(meta.OwnedPartitions) != 2 || meta.OwnedPartitions[0].Topic != "a" || len(meta.OwnedPartitions[0].Partitions) != 2 {
		t.Errorf("owned partitions %+v, want a[0 3] b[1]", meta.OwnedPartitions)
	}
}

func TestAssignmentRoundTrip(t *testing.T) {
	a := asg(t, "a/0=0-65536", "a/3=100-200", "b/1=0-5")
	got, err := decodeAssignment(encodeAssignment(a))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(a, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if got, err := decodeAssignment(nil); err != nil || len(got) != 0 {
		t.Errorf("empty assignment = %v, %v; want nothing assigned", got, err)
	}
}

func TestDecodeRejectsListingThatDisagreesWithRanges(t *testing.T) {
	ranges := appendRanges(nil, asg(t, "a/0=0-65536"))

	meta := kmsg.NewConsumerMemberMetadata()
	meta.Version = 3
	meta.Topics = []string{"a"}
	meta.UserData = ranges
	op := kmsg.NewConsumerMemberMetadataOwnedPartition()
	op.Topic = "a"
	op.Partitions = []int32{0, 1}
	meta.OwnedPartitions = append(meta.OwnedPartitions, op)
	if _, err := decodeMetadata("m", meta.AppendTo(nil)); !errors.Is(err, ErrMalformed) {
		t.Errorf("metadata owning a partition without ranges: %v, want ErrMalformed", err)
	}
	meta.OwnedPartitions = nil
	if _, err := decodeMetadata("m", meta.AppendTo(nil)); !errors.Is(err, ErrMalformed) {
		t.Errorf("metadata with ranges of a partition it does not own: %v, want ErrMalformed", err)
	}

	asgn := kmsg.NewConsumerMemberAssignment()
	asgn.UserData = ranges
	if _, err := decodeAssignment(asgn.AppendTo(nil)); !errors.Is(err, ErrMalformed) {
		t.Errorf("assignment with ranges of an unlisted partition: %v, want ErrMalformed", err)
	}
	at := kmsg.NewConsumerMemberAssignmentTopic()
	at.Topic = "a"
	at.Partitions = []int32{0, 0}
	asgn.Topics = append(asgn.Topics, at)
	if _, err := decodeAssignment(asgn.AppendTo(nil)); !errors.Is(err, ErrMalformed) {
		t.Errorf("assignment listing a partition twice: %v, want ErrMalformed", err)
	}
	if _, err := decodeAssignment([]byte{0, 0, 0}); !errors.Is(err, ErrMalformed) {
		t.Errorf("truncated assignment: %v, want ErrMalformed", err)
	}
}

func FuzzDecodeRanges(f *testing.F) {
	f.Add(appendRanges(nil, Assignment{}))
	f.Add(appendRanges(nil, Assignment{"t": {0: keyrange.Full()}}))
	f.Add(appendRanges(nil, Assignment{"t": {0: {{Lo: 1, Hi: 2}, {Lo: 9, Hi: 65536}}, 4: {{Lo: 0, Hi: 3}}}, "u": {1: keyrange.Full()}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := decodeRanges(b)
		if err != nil {
			return
		}
		// The encoding is canonical: what decodes encodes back the same.
		if again := appendRanges(nil, a); !bytes.Equal(again, b) {
			t.Fatalf("decoded %x as %v, which encodes as %x", b, a, again)
		}
		for _, ps := range a {
			for _, s := range ps {
				if norm, err := keyrange.NewSet(s...); err != nil || !norm.Equal(s) || s.IsEmpty() {
					t.Fatalf("decoded a set that is not canonical: %v", s)
				}
			}
		}
	})
}

func FuzzDecodeMetadata(f *testing.F) {
	f.Add(encodeMetadata([]string{"t"}, Assignment{}, -1))
	f.Add(encodeMetadata([]string{"t", "u"}, Assignment{"t": {0: keyrange.Full(), 2: {{Lo: 5, Hi: 7}}}}, 3))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMetadata("m", b)
		if err != nil {
			return
		}
		again, err := decodeMetadata("m", encodeMetadata(m.Topics, m.Owned, m.Generation))
		if err != nil {
			t.Fatalf("re-encoded metadata does not decode: %v", err)
		}
		if diff := cmp.Diff(m.Owned, again.Owned); diff != "" {
			t.Fatalf("owned changed through a round trip (-first +again):\n%s", diff)
		}
	})
}

func FuzzDecodeAssignment(f *testing.F) {
	f.Add(encodeAssignment(Assignment{}))
	f.Add(encodeAssignment(Assignment{"t": {0: keyrange.Full(), 2: {{Lo: 5, Hi: 7}}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := decodeAssignment(b)
		if err != nil {
			return
		}
		again, err := decodeAssignment(encodeAssignment(a))
		if err != nil {
			t.Fatalf("re-encoded assignment does not decode: %v", err)
		}
		if diff := cmp.Diff(a, again); diff != "" {
			t.Fatalf("assignment changed through a round trip (-first +again):\n%s", diff)
		}
	})
}
