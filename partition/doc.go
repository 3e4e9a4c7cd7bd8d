// Package partition is the state of one assigned partition, as a pure
// state machine: key lanes (only a lane's head is dispatched), the window
// between the watermark and the fetch position with its pause and resume
// decisions, batch assembly, skipping what a previous owner acked, and the
// rules that turn acks into a watermark, a watermark into a flush and a
// flush into a Kafka commit. A key holding more than it can deliver parks
// its later records by offset (their values dropped) until it has room,
// when the caller fetches them again (Reread, Unpark); records about to
// fall out of the topic's retention leave their key's turn (Expire).
//
// A Machine has no goroutines, no clock of its own (callers pass the time
// where it matters), no Kafka client and no Redis. The dispatcher's
// partition worker drives it from one goroutine: it offers fetched records,
// takes what is ready to dispatch, reports results, writes the snapshots it
// is given to the tracker and commits the offset it is told to. Everything
// that decides what may be sent, acked, flushed or committed lives here, so
// it can be tested exhaustively without any of those.
//
// The positions, all offsets of the partition:
//
//	floor      every offset below is done: committed, or before the first record
//	watermark  the lowest offset at or above floor that is not acked
//	next       the fetch position: the offset expected from the next record
//	flushed    the watermark of the last successful flush to the tracker
//	committed  the last Kafka commit known
//
// floor ≤ watermark; the watermark may pass next when a previous owner
// acked offsets this node has not fetched yet. The commit only ever moves forward, and only to
// flushed; flushed only to a watermark: the Kafka commit is never ahead of
// the tracking state, nor the tracking state ahead of what was acked.
//
// The machine is made of parts, each with the fields it owns and the
// rules that change them, in a file of its own:
//
//	machine.go    claiming, offering and accepting records (classify,
//	              then place), the window, dispatch, acks
//	entry.go      a record and its entry: one state, owned by the
//	              machine's goroutine alone
//	positions.go  the offsets above, the acked set, floors; flush, commit
//	holdings.go   what records hold of the two budgets: reserve, release
//	parking.go    parking by offset: lane caps, runs, evict, reread,
//	              unpark, what retention deleted
//	sharing.go    key ranges: owns, freeze, drain, shrink; nil when whole
//	expiry.go     records about to fall out of retention
//	batch.go      batch assembly
//	inject.go     records that are not offsets of the partition
//	ready.go      the ready queue, oldest first
//	stalled.go    the keys whose records do not flow, a read-only view
package partition
