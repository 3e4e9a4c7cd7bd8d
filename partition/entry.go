package partition

import "time"

// Record is one fetched record as the machine sees it.
type Record[P any] struct {
	// Offset is the record's offset.
	Offset int64
	// Key is the record key; nil means no key.
	Key []byte
	// Control marks a transaction marker: never delivered, acked at once.
	Control bool
	// Skip marks a record the subscription's filter rejected: never
	// delivered, acked at once like a transaction marker, holding no
	// memory, counted (Filtered).
	Skip bool
	// Size counts against Batch.MaxBytes (the value's length).
	Size int
	// Bytes is what the record holds in memory, counted against the
	// Budget while it is pending.
	Bytes int64
	// Time is the record's timestamp.
	Time time.Time
	// Payload is the caller's record, handed back in the Entry.
	Payload P
}

// Entry is a record the machine tracks until it is acked.
//
// The goroutine driving the machine owns the entry and every field of
// it, the exported ones too: Expire marks entries out, Done changes their
// state. What a delivery elsewhere needs goes to it as values the caller
// copies on that goroutine (the payload, the lane's key).
type Entry[P any] struct {
	// Offset is the record's offset.
	Offset int64
	// Payload is the caller's record.
	Payload P
	// Dispatched is when the record last went to the endpoint; zero
	// until then.
	Dispatched time.Time
	// Accepted is when the machine took the record in (first, if it was
	// parked).
	Accepted time.Time
	// Time is the record's timestamp.
	Time time.Time

	state state
	size  int
	bytes int64
	lane  *lane[P]
	// extra: queued by Inject, outside the partition's offsets.
	extra bool
	// hash is the record's key hash (keyrange), set when the partition
	// is shared: it decides which sharer delivers it.
	hash uint16
	// expiring: the topic's retention is about to delete the record (see
	// Expire).
	expiring bool
}

// state is where an entry is in its life; it is in exactly one.
type state uint8

const (
	// stateQueued: waiting on its lane behind its head, or a head (or
	// lane-less record) held back because its range is frozen.
	stateQueued state = iota
	// stateReady: in the ready queue, or the injected ones' when injected.
	stateReady
	// stateTaken: in a batch Assemble returned, not dispatched yet. A
	// record taken behind its lane's head is not made ready again when
	// the head is acked.
	stateTaken
	// stateOut: dispatched, no result yet.
	stateOut
	// stateAborted: its attempt was cut; it waits for the next owner and
	// is never dispatched again here.
	stateAborted
	// stateFinished: its result came and it left the machine (acked, or
	// an injected record's end whatever its outcome).
	stateFinished
)

// Expiring reports whether the record was found about to fall out of the
// topic's retention while pending (see Expire): it goes out of its key's
// turn, and its delivery should end at once (dead-lettered) where the
// subscription allows.
func (e *Entry[P]) Expiring() bool { return e.expiring }

// Out reports whether the entry was dispatched and has no result yet.
func (e *Entry[P]) Out() bool { return e.state == stateOut }

// Extra reports whether the entry was queued by Inject.
func (e *Entry[P]) Extra() bool { return e.extra }

// LaneKey returns the key of the entry's lane, false when it has none
// (ordering none, or a record without a key under ordering key). Records
// of one lane are delivered in offset order, one at a time.
func (e *Entry[P]) LaneKey() (string, bool) {
	if e.lane == nil {
		return "", false
	}
	return e.lane.key, true
}

// lane is the FIFO of one key's pending records; only its head is out.
type lane[P any] struct {
	key string
	q   []*Entry[P]
	// parked follow q, in order: runs of offsets whose values were
	// dropped, and records injected behind them.
	parked []parkRun[P]
	// rescue, when not 0, is a timestamp (unix ms): parked runs read
	// before it are expiring, taken back out of turn whatever room the
	// lane has.
	rescue int64
}
