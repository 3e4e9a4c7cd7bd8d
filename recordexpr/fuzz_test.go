package recordexpr

import (
	"testing"
)

// FuzzExpressions defends that no expression and no record make Compile,
// Filter or Render panic, and that an evaluation is deterministic (the
// dispatcher evaluates a record again when it is read again).
func FuzzExpressions(f *testing.F) {
	f.Add(`value.type == 'order.paid'`, `{"type":"order.paid"}`, "k", true)
	f.Add(`key == 'customer-1'`, `x`, "customer-1", false)
	f.Add(`{"id": value.id, "k": key}`, `{"id":1}`, "\xff", true)
	f.Add(`value.items.map(i, i * 2)`, `{"items":[1,2,3]}`, "", true)
	f.Fuzz(func(t *testing.T, expr, value, key string, json bool) {
		spec := Spec{Filter: expr}
		if json {
			spec.ValueFormat = FormatJSON
		}
		rec := &Record{Key: []byte(key), Value: []byte(value), Headers: headers("h", value), Topic: "t", Offset: 7}
		if p, err := Compile(spec); err == nil {
			a, errA := p.Filter(rec)
			b, errB := p.Filter(rec)
			if a != b || (errA == nil) != (errB == nil) {
				t.Fatalf("Filter(%q) twice: %v, %v then %v, %v", expr, a, errA, b, errB)
			}
		}
		spec = Spec{Transform: expr, ValueFormat: spec.ValueFormat}
		if p, err := Compile(spec); err == nil {
			a, errA := p.Render(rec)
			b, errB := p.Render(rec)
			if string(a.Value) != string(b.Value) || (errA == nil) != (errB == nil) {
				t.Fatalf("Render(%q) twice: %q, %v then %q, %v", expr, a.Value, errA, b.Value, errB)
			}
		}
	})
}
