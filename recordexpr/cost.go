package recordexpr

import (
	"cel.dev/cel-go/common/cost"
)

// sizes bounds, for the compile-time estimate, every string, bytes, list
// and map an expression reads from a record or derives from one
// (string(offset), a concatenation, a comprehension's result) by
// EstimateRecordBytes, where the checker would otherwise take it as
// unbounded. Function costs are CEL's.
type sizes struct{}

func (sizes) EstimateSize(cost.AstNode) *cost.SizeEstimate {
	e := cost.SizeEstimate{Min: 0, Max: EstimateRecordBytes}
	return &e
}

func (sizes) EstimateCallCost(string, string, *cost.AstNode, []cost.AstNode) *cost.CallEstimate {
	return nil
}
