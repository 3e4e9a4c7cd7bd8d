package recordexpr

import (
	"testing"
	"time"
)

// BenchmarkFilter measures one filter evaluation per record: on the key
// (bytes formats), and on a field of a JSON value (decoding included),
// each against a bytes pass-through (no program) timed in the same run;
// ratio is the evaluation's cost over the pass-through's.
func BenchmarkFilter(b *testing.B) {
	value := []byte(`{"type":"order.paid","order_id":"o-123","amount":12.5,"currency":"EUR","customer":{"id":"c-9","tier":"gold"},"items":[{"sku":"a","n":1},{"sku":"b","n":2}],"at":"2026-12-03T17:00:00Z","ok":true}`)
	rec := &Record{Key: []byte("customer-1"), Value: value, Headers: headers("type", "order.paid"), Topic: "orders", Offset: 1, Timestamp: time.Now()}
	for _, c := range []struct {
		name string
		spec Spec
	}{
		{"key", Spec{Filter: `key == 'customer-1'`}},
		{"header", Spec{Filter: `headers['type'] == 'order.paid'`}},
		{"json_value", Spec{Filter: `value.type == 'order.paid' && value.amount > 10.0`, ValueFormat: FormatJSON}},
	} {
		b.Run(c.name, func(b *testing.B) {
			p, err := Compile(c.spec)
			if err != nil {
				b.Fatal(err)
			}
			passthrough := &Program{} // no filter: what a bytes subscription pays
			var base, eval time.Duration
			for b.Loop() {
				t0 := time.Now()
				if ok, _ := passthrough.Filter(rec); !ok {
					b.Fatal("pass-through rejected")
				}
				t1 := time.Now()
				if ok, err := p.Filter(rec); !ok || err != nil {
					b.Fatal(ok, err)
				}
				base += t1.Sub(t0)
				eval += time.Since(t1)
			}
			b.ReportMetric(float64(eval.Nanoseconds())/float64(b.N), "ns/filter")
			b.ReportMetric(float64(base.Nanoseconds())/float64(b.N), "ns/passthrough")
			b.ReportMetric(float64(eval)/float64(max(base, 1)), "ratio")
		})
	}
}
