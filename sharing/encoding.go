package sharing

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keyhook/keyhook/keyrange"
)

// rangesVersion is the first byte of the ranges carried in UserData. A
// change of format gets a new version and a new protocol name, so members
// of one protocol always read each other.
const rangesVersion = 1

// ErrMalformed is wrapped by the errors of every decoder of this package:
// member metadata, assignments and the ranges inside them.
var ErrMalformed = errors.New("malformed")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}

// appendRanges encodes a: the version byte, then topics in order, each
// with its partitions in order, each with its ranges, every number an
// unsigned varint:
//
//	version  topics  (len name  partitions  (partition  ranges  (lo hi)…)…)…
//
// The encoding is canonical: decodeRanges accepts exactly what this
// writes, so equal assignments give equal bytes and JoinGroup metadata
// does not change (and rebalance) for nothing.
func appendRanges(dst []byte, a Assignment) []byte {
	dst = append(dst, rangesVersion)
	topics := sortedKeys(a)
	dst = binary.AppendUvarint(dst, uint64(len(topics)))
	for _, t := range topics {
		dst = binary.AppendUvarint(dst, uint64(len(t)))
		dst = append(dst, t...)
		parts := sortedKeys(a[t])
		dst = binary.AppendUvarint(dst, uint64(len(parts)))
		for _, p := range parts {
			s := a[t][p]
			dst = binary.AppendUvarint(dst, uint64(p))
			dst = binary.AppendUvarint(dst, uint64(len(s)))
			for _, r := range s {
				dst = binary.AppendUvarint(dst, uint64(r.Lo))
				dst = binary.AppendUvarint(dst, uint64(r.Hi))
			}
		}
	}
	return dst
}

func sortedKeys[K interface{ ~string | ~int32 }, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// decodeRanges reads what appendRanges writes. Anything else — another
// version, a truncated or trailing byte, unsorted or repeated topics or
// partitions, a partition without ranges, ranges that are empty, beyond
// the space, unsorted, overlapping or touching — is an error.
func decodeRanges(b []byte) (Assignment, error) {
	d := decoder{b: b}
	if len(b) == 0 {
		return nil, malformed("ranges: empty")
	}
	if v := d.b[0]; v != rangesVersion {
		return nil, malformed("ranges: unknown version %d", v)
	}
	d.b = d.b[1:]
	a := Assignment{}
	// Every topic takes at least two bytes: counts are bounded by what is
	// left, so a hostile count cannot make us allocate.
	nTopics := d.count("topics", 2)
	prevTopic := ""
	for i := 0; i < nTopics && d.err == nil; i++ {
		t := d.string()
		if d.err == nil && i > 0 && t <= prevTopic {
			d.fail("topic %q out of order", t)
		}
		prevTopic = t
		nParts := d.count("partitions", 3)
		if d.err == nil && nParts == 0 {
			d.fail("topic %q without partitions", t)
		}
		prevPart := int64(-1)
		for j := 0; j < nParts && d.err == nil; j++ {
			p := d.uvarint()
			if d.err == nil && (p > math.MaxInt32 || int64(p) <= prevPart) {
				d.fail("topic %q: partition %d out of order or range", t, p)
			}
			prevPart = int64(p)
			nRanges := d.count("ranges", 2)
			if d.err == nil && nRanges == 0 {
				d.fail("topic %q partition %d without ranges", t, p)
			}
			s := make(keyrange.Set, 0, nRanges)
			for k := 0; k < nRanges && d.err == nil; k++ {
				lo, hi := d.uvarint(), d.uvarint()
				switch {
				case d.err != nil:
				case lo >= hi || hi > keyrange.Space:
					d.fail("topic %q partition %d: bad range %d-%d", t, p, lo, hi)
				case k > 0 && lo <= uint64(s[k-1].Hi):
					d.fail("topic %q partition %d: ranges overlap, touch or are unsorted", t, p)
				default:
					s = append(s, keyrange.Range{Lo: uint32(lo), Hi: uint32(hi)})
				}
			}
			if d.err == nil {
				a.set(t, int32(p), s)
			}
		}
	}
	if d.err == nil && len(d.b) > 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	return a, nil
}

// decoder reads unsigned varints and strings, keeping the first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = malformed("ranges: "+format, args...)
	}
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	// A longer form than needed ends in a zero byte; accepting it would
	// give one assignment two encodings.
	if n <= 0 || (n > 1 && d.b[n-1] == 0) {
		d.fail("bad or truncated number")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads the length of a list whose every element takes at least
// minBytes bytes.
func (d *decoder) count(what string, minBytes int) int {
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b)/minBytes) {
		d.fail("%d %s in %d bytes", n, what, len(d.b))
		return 0
	}
	return int(n)
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b)) {
		d.fail("string of %d bytes in %d", n, len(d.b))
	}
	if d.err != nil {
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// topicPartitions lists a's partitions as franz-go wants them: topic →
// sorted partitions.
func topicPartitions(a Assignment) map[string][]int32 {
	out := make(map[string][]int32, len(a))
	for t, ps := range a {
		out[t] = sortedKeys(ps)
	}
	return out
}

// sameListing reports whether the partitions of a are exactly listed:
// the standard consumer fields and our ranges must agree.
func sameListing(a Assignment, listed map[string][]int32) error {
	n := 0
	for t, ps := range listed {
		seen := make(map[int32]bool, len(ps))
		for _, p := range ps {
			if seen[p] {
				return malformed("topic %q partition %d listed twice", t, p)
			}
			seen[p] = true
			if a.Get(t, p).IsEmpty() {
				return malformed("topic %q partition %d listed without ranges", t, p)
			}
		}
		n += len(ps)
	}
	for t, ps := range a {
		if _, ok := listed[t]; !ok {
			return malformed("ranges of topic %q, which is not listed", t)
		}
		n -= len(ps)
	}
	if n != 0 {
		return malformed("ranges of partitions that are not listed")
	}
	return nil
}

// encodeMetadata is the JoinGroup metadata of a member: the standard
// consumer metadata (v3, with owned partitions and generation) whose
// UserData carries the owned ranges.
func encodeMetadata(topics []string, owned Assignment, generation int32) []byte {
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Version = 3
	meta.Topics = topics
	meta.Generation = generation
	for _, t := range sortedKeys(owned) {
		op := kmsg.NewConsumerMemberMetadataOwnedPartition()
		op.Topic = t
		op.Partitions = sortedKeys(owned[t])
		meta.OwnedPartitions = append(meta.OwnedPartitions, op)
	}
	meta.UserData = appendRanges(nil, owned)
	return meta.AppendTo(nil)
}

// memberFromMetadata reads a member's ownership out of its parsed
// consumer metadata.
func memberFromMetadata(id string, meta *kmsg.ConsumerMemberMetadata) (Member, error) {
	owned, err := decodeRanges(meta.UserData)
	if err != nil {
		return Member{}, fmt.Errorf("member %s: %w", id, err)
	}
	listed := make(map[string][]int32, len(meta.OwnedPartitions))
	for _, op := range meta.OwnedPartitions {
		if _, dup := listed[op.Topic]; dup {
			return Member{}, fmt.Errorf("member %s: %w", id, malformed("owned topic %q listed twice", op.Topic))
		}
		listed[op.Topic] = op.Partitions
	}
	if err := sameListing(owned, listed); err != nil {
		return Member{}, fmt.Errorf("member %s: owned: %w", id, err)
	}
	return Member{ID: id, Topics: meta.Topics, Owned: owned, Generation: meta.Generation}, nil
}

// decodeMetadata parses a member's JoinGroup metadata.
func decodeMetadata(id string, b []byte) (Member, error) {
	meta := kmsg.NewConsumerMemberMetadata()
	if err := meta.ReadFrom(b); err != nil {
		return Member{}, fmt.Errorf("member %s: %w: metadata: %w", id, ErrMalformed, err)
	}
	return memberFromMetadata(id, &meta)
}

// encodeAssignment is what one member gets in SyncGroup: the standard
// consumer assignment, every partition listed (whole ones too), with the
// ranges in UserData.
func encodeAssignment(a Assignment) []byte {
	asg := kmsg.NewConsumerMemberAssignment()
	for _, t := range sortedKeys(a) {
		at := kmsg.NewConsumerMemberAssignmentTopic()
		at.Topic = t
		at.Partitions = sortedKeys(a[t])
		asg.Topics = append(asg.Topics, at)
	}
	asg.UserData = appendRanges(nil, a)
	return asg.AppendTo(nil)
}

// decodeAssignment reads what encodeAssignment writes. An empty
// assignment is what the coordinator sends a member the leader gave
// nothing to.
func decodeAssignment(b []byte) (Assignment, error) {
	if len(b) == 0 {
		return Assignment{}, nil
	}
	asg := kmsg.NewConsumerMemberAssignment()
	if err := asg.ReadFrom(b); err != nil {
		return nil, fmt.Errorf("%w: assignment: %w", ErrMalformed, err)
	}
	a, err := decodeRanges(asg.UserData)
	if err != nil {
		return nil, fmt.Errorf("assignment: %w", err)
	}
	listed := make(map[string][]int32, len(asg.Topics))
	for _, at := range asg.Topics {
		if _, dup := listed[at.Topic]; dup {
			return nil, malformed("assignment: topic %q listed twice", at.Topic)
		}
		listed[at.Topic] = at.Partitions
	}
	if err := sameListing(a, listed); err != nil {
		return nil, fmt.Errorf("assignment: %w", err)
	}
	return a, nil
}
