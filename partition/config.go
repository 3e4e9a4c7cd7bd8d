package partition

import (
	"fmt"
	"time"
)

// Ordering says which records of a partition wait for each other.
type Ordering int

const (
	// OrderKey delivers one record per key at a time, in offset order;
	// records without a key wait for nothing.
	OrderKey Ordering = iota
	// OrderPartition delivers one record of the partition at a time.
	OrderPartition
	// OrderNone delivers every record at once.
	OrderNone
)

// Batch configures batch assembly. MaxRecords 0 means no batching.
type Batch struct {
	// MaxRecords is the most records of one batch.
	MaxRecords int
	// MaxBytes bounds the summed record sizes of one batch; a batch always
	// takes at least one record whatever its size. 0 means no bound.
	MaxBytes int
	// MaxWait is how long the oldest ready record waits for more to join
	// it before a smaller batch goes. 0 sends at once.
	MaxWait time.Duration
}

// Config tunes a Machine.
type Config struct {
	// Ordering is the subscription's ordering. Default OrderKey.
	Ordering Ordering
	// MaxWindow bounds the records between the watermark and the fetch
	// position (with ParkAfter, under ordering key or none: the records
	// held in memory): at MaxWindow the partition pauses (Paused reports
	// true) and records offered beyond it wait in a backlog; below half
	// of it, it resumes. Required.
	MaxWindow int64
	// Batch turns batching on when MaxRecords > 0.
	Batch Batch
	// Clock returns the time: when records are dispatched and how long a
	// batch has waited. Default time.Now.
	Clock func() time.Time
	// Budget, when set, bounds the bytes that accepted records hold,
	// shared with other partitions: a record is accepted only once its
	// bytes are reserved, and released when it is acked or the machine is
	// closed. Without room the partition pauses like a full window.
	Budget Budget
	// ParkAfter, when positive, lets keys park records by offset under
	// ordering key, their values dropped, until Unpark takes them back
	// from a fetch made again (Reread says from where). MaxWindow then
	// bounds the records held in memory, not the distance from the
	// watermark, so a stuck key no longer stops its partition. A key
	// holds up to a tenth of the window in memory (at least four times
	// ParkAfter) and parks what comes beyond. When the window is full and
	// fewer than ReadyFloor records are ready to send, the partition is
	// short of work that memory could hold: keys holding more than
	// ParkAfter park the rest of their records in memory and what comes
	// next, making room for the others. While enough are ready, a full
	// window pauses the fetch instead: delivery is what limits, and
	// parking would only read records twice. 0 holds every record in
	// memory.
	ParkAfter int
	// ReadyFloor, with ParkAfter, is how many records ready to send keep
	// a full window from parking (see ParkAfter). Default 1: park only
	// when nothing is left to send.
	ReadyFloor int
	// ParkedBytes is what one parked record costs of the ParkBudget: its
	// place among its key's parked offsets and the gap it leaves in the
	// acked set. Default 64.
	ParkedBytes int64
	// Conflate, under ordering key, keeps only the newest record of a key
	// waiting behind its record in flight: an older one waiting is
	// superseded, acked without delivery and counted (Superseded). For
	// state-like topics, where only a key's latest value matters.
	Conflate bool
	// ParkBudget, when set, bounds what parked records cost, shared with
	// other partitions; without room a key parks nothing more and the
	// partition pauses. It is apart from Budget so that parked records
	// can never take the room their own return needs.
	ParkBudget Budget
}

// Validate reports the first field that is wrong, by name.
func (c Config) Validate() error {
	switch {
	case c.Ordering < OrderKey || c.Ordering > OrderNone:
		return fmt.Errorf("partition: Ordering %d is unknown", c.Ordering)
	case c.MaxWindow <= 0:
		return fmt.Errorf("partition: MaxWindow %d must be positive", c.MaxWindow)
	case c.Batch.MaxRecords < 0:
		return fmt.Errorf("partition: Batch.MaxRecords %d must not be negative", c.Batch.MaxRecords)
	case c.Batch.MaxBytes < 0:
		return fmt.Errorf("partition: Batch.MaxBytes %d must not be negative", c.Batch.MaxBytes)
	case c.Batch.MaxWait < 0:
		return fmt.Errorf("partition: Batch.MaxWait %v must not be negative", c.Batch.MaxWait)
	case c.ParkAfter < 0:
		return fmt.Errorf("partition: ParkAfter %d must not be negative", c.ParkAfter)
	case c.ParkedBytes < 0:
		return fmt.Errorf("partition: ParkedBytes %d must not be negative", c.ParkedBytes)
	case c.ReadyFloor < 0:
		return fmt.Errorf("partition: ReadyFloor %d must not be negative", c.ReadyFloor)
	}
	return nil
}
