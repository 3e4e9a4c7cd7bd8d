package subscription

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// SeekTo says where a seek moves a subscription's consumer group.
type SeekTo string

const (
	// SeekEarliest moves every partition to its oldest retained record.
	SeekEarliest SeekTo = "earliest"
	// SeekLatest moves every partition to its end: records already in the
	// log are skipped.
	SeekLatest SeekTo = "latest"
	// SeekTimestamp moves every partition to its first record with a
	// timestamp at or after SeekRequest.Timestamp (the end when there is
	// none).
	SeekTimestamp SeekTo = "timestamp"
	// SeekOffsets moves the partitions listed in SeekRequest.Offsets, and
	// only those, to the given offsets.
	SeekOffsets SeekTo = "offsets"
)

// MaxSeekOffsets is the most partitions one SeekOffsets request may list.
const MaxSeekOffsets = 10000

// SeekRequest asks to move the committed position of a subscription's
// consumer group. Records before the new position are not delivered;
// records after it are delivered again, even those delivered before.
type SeekRequest struct {
	// To is where to move.
	To SeekTo `json:"to"`
	// Timestamp is the time to seek to; set exactly when To is
	// SeekTimestamp.
	Timestamp time.Time `json:"timestamp,omitzero"`
	// Offsets lists the partitions to move; set exactly when To is
	// SeekOffsets.
	Offsets []SeekOffset `json:"offsets,omitempty"`
}

// SeekOffset is one partition's new position.
type SeekOffset struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Offset is the next offset to deliver. An offset outside the
	// partition's retained range is clamped to it by the seek.
	Offset int64 `json:"offset"`
}

// Validate returns every problem found in r as a seek of sub, in field
// order, or nil. It checks what can be checked without Kafka: the fields
// that To needs are there and the others are not, and each listed
// partition belongs to one of sub's topics, has a non-negative number and
// offset, and is listed once. Whether a partition exists is the seek's to
// say.
func (r *SeekRequest) Validate(sub *Subscription) []FieldError {
	var errs []FieldError
	add := func(field, msg string) { errs = append(errs, FieldError{Field: field, Message: msg}) }
	switch r.To {
	case SeekEarliest, SeekLatest, SeekTimestamp, SeekOffsets:
	case "":
		add("to", `is required: one of "earliest", "latest", "timestamp", "offsets"`)
	default:
		add("to", `must be one of "earliest", "latest", "timestamp", "offsets"`)
	}
	switch {
	case r.To == SeekTimestamp && r.Timestamp.IsZero():
		add("timestamp", `is required with to "timestamp"`)
	case r.To != SeekTimestamp && !r.Timestamp.IsZero():
		add("timestamp", `is allowed only with to "timestamp"`)
	}
	switch {
	case r.To == SeekOffsets && len(r.Offsets) == 0:
		add("offsets", `must list at least one partition with to "offsets"`)
	case r.To != SeekOffsets && len(r.Offsets) > 0:
		add("offsets", `is allowed only with to "offsets"`)
	case len(r.Offsets) > MaxSeekOffsets:
		add("offsets", fmt.Sprintf("must list at most %d partitions", MaxSeekOffsets))
	case r.To == SeekOffsets:
		topics := make(map[string]bool, len(sub.Topics))
		for _, t := range sub.Topics {
			topics[t] = true
		}
		type tp struct {
			topic     string
			partition int32
		}
		first := make(map[tp]int, len(r.Offsets))
		for i, o := range r.Offsets {
			field := "offsets[" + strconv.Itoa(i) + "]"
			if !topics[o.Topic] {
				add(field+".topic", "must be one of the subscription's topics")
			}
			if o.Partition < 0 {
				add(field+".partition", fmt.Sprintf("must be between 0 and %d", math.MaxInt32))
			}
			if o.Offset < 0 {
				add(field+".offset", "must not be negative")
			}
			if j, dup := first[tp{o.Topic, o.Partition}]; dup {
				add(field, fmt.Sprintf("duplicates offsets[%d]", j))
				continue
			}
			first[tp{o.Topic, o.Partition}] = i
		}
	}
	return errs
}

// SeekResult reports what a seek moved.
type SeekResult struct {
	SubscriptionID string `json:"subscription_id"`
	// Partitions lists every partition whose commit was rewritten, sorted
	// by topic and partition.
	Partitions []SeekedPartition `json:"partitions"`
}

// SeekedPartition is one partition's move.
type SeekedPartition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Previous is the committed offset before the seek, -1 if none.
	Previous int64 `json:"previous"`
	// Offset is the committed offset after the seek: the next record
	// delivered.
	Offset int64 `json:"offset"`
}
