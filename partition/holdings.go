package partition

// Budget is a byte budget shared by the partitions of a node.
type Budget interface {
	// Reserve takes n bytes, false (taking nothing) when they do not fit.
	Reserve(n int64) bool
	// Release gives n bytes back.
	Release(n int64)
}

// holdings is what a machine's records hold of the node's two budgets:
// the bytes of the records pending in memory, of the Budget, and the cost
// of those parked by offset, of the ParkBudget. Either budget may be nil,
// and nothing is then held of it. Every reservation and release goes
// through here, so what is held is always what was taken. The machine's
// goroutine owns the counts; the budgets, shared with other partitions,
// are safe for concurrent use.
type holdings struct {
	budget, parkBudget Budget
	// parkedBytes is what one parked record costs (Config.ParkedBytes).
	parkedBytes int64
	// held is what pending records hold of budget, parkHeld what parked
	// ones hold of parkBudget.
	held, parkHeld int64
}

// reserve takes n bytes of the Budget for a record in memory and returns
// what it took: nothing without a Budget or bytes. It reports false,
// taking nothing, when they do not fit.
func (h *holdings) reserve(n int64) (int64, bool) {
	if h.budget == nil || n <= 0 {
		return 0, true
	}
	if !h.budget.Reserve(n) {
		return 0, false
	}
	h.held += n
	return n, true
}

// release gives back n bytes reserve took.
func (h *holdings) release(n int64) {
	if n > 0 {
		h.held -= n
		h.budget.Release(n)
	}
}

// reservePark takes what one parked record costs of the ParkBudget, false
// (taking nothing) when it does not fit.
func (h *holdings) reservePark() bool {
	if h.parkBudget == nil {
		return true
	}
	if !h.parkBudget.Reserve(h.parkedBytes) {
		return false
	}
	h.parkHeld += h.parkedBytes
	return true
}

// releaseParked gives back what n parked records cost.
func (h *holdings) releaseParked(n int64) {
	if h.parkBudget != nil {
		b := min(n*h.parkedBytes, h.parkHeld)
		h.parkHeld -= b
		h.parkBudget.Release(b)
	}
}

// releaseAll gives back everything held.
func (h *holdings) releaseAll() {
	if h.budget != nil && h.held > 0 {
		h.budget.Release(h.held)
	}
	if h.parkBudget != nil && h.parkHeld > 0 {
		h.parkBudget.Release(h.parkHeld)
	}
	h.held, h.parkHeld = 0, 0
}
