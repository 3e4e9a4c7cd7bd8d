package partition

import (
	"fmt"
	"sync/atomic"
)

// MemoryBudget is a Budget of bytes shared by every partition of a node,
// safe for concurrent use. It bounds what accepted records hold across all
// partitions and subscriptions, so an endpoint outage that fills every
// window cannot grow a node past its memory limit.
type MemoryBudget struct {
	max  int64
	used atomic.Int64
}

// NewMemoryBudget returns a budget of max bytes.
func NewMemoryBudget(max int64) (*MemoryBudget, error) {
	if max <= 0 {
		return nil, fmt.Errorf("partition: memory budget %d must be positive", max)
	}
	return &MemoryBudget{max: max}, nil
}

// Reserve takes n bytes when they fit. A single record larger than the
// whole budget is let through when nothing else is held, so it cannot
// stall its partition forever.
func (b *MemoryBudget) Reserve(n int64) bool {
	for {
		used := b.used.Load()
		if used+n > b.max && used > 0 {
			return false
		}
		if b.used.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

// Release gives n bytes back.
func (b *MemoryBudget) Release(n int64) { b.used.Add(-n) }

// Used returns the bytes held now.
func (b *MemoryBudget) Used() int64 { return b.used.Load() }

// Max returns the budget's size.
func (b *MemoryBudget) Max() int64 { return b.max }
