package schemas

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/keyhook/keyhook/recordexpr"
)

const benchSchema = `{"type":"record","name":"Order","namespace":"shop","fields":[
	{"name":"order_id","type":"string"},
	{"name":"customer_id","type":"long"},
	{"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","PAID","SHIPPED"]}},
	{"name":"amount","type":"double"},
	{"name":"currency","type":"string"},
	{"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
	{"name":"note","type":["null","string"],"default":null},
	{"name":"items","type":"int"},
	{"name":"gift","type":"boolean"},
	{"name":"region","type":"string"}]}`

// BenchmarkAvroFilter measures what a partition's worker pays per record
// of value_format avro: the Confluent header, the cached schema, the
// decoding of a 10-field record and a filter on two of its fields, for a
// record the filter passes and for one it rejects; each against a filter
// on the key of a bytes subscription timed in the same run (ratio is
// avro's cost over bytes').
func BenchmarkAvroFilter(b *testing.B) {
	reg := srfake.New()
	defer reg.Close()
	id, _, err := reg.RegisterSchema("orders-value", sr.Schema{Schema: benchSchema})
	if err != nil {
		b.Fatal(err)
	}
	r := newRegistry(b, reg)
	value := func(status string) []byte {
		return wire(b, id, benchSchema, map[string]any{
			"order_id": "o-123", "customer_id": int64(9007199254740993), "status": status, "amount": 12.5,
			"currency": "EUR", "at": time.UnixMilli(1796317200123).UTC(), "note": map[string]any{"string": "gift wrap"},
			"items": int32(3), "gift": true, "region": "eu-west-1",
		})
	}
	paid, shipped := value("PAID"), value("SHIPPED")
	if err := r.Decoder(recordexpr.FormatAvro).(recordexpr.Waiter).Wait(context.Background(), paid); err != nil {
		b.Fatal(err)
	}
	avroProg, err := recordexpr.Compile(recordexpr.Spec{ValueFormat: recordexpr.FormatAvro,
		Filter: `value.status == 'PAID' && value.amount > 10.0`}, recordexpr.WithSchemas(r))
	if err != nil {
		b.Fatal(err)
	}
	bytesProg, err := recordexpr.Compile(recordexpr.Spec{Filter: `key == 'customer-1'`})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		value []byte
		want  bool
	}{{"passed", paid, true}, {"rejected", shipped, false}} {
		b.Run(c.name, func(b *testing.B) {
			rec := &recordexpr.Record{Key: []byte("customer-1"), Value: c.value, Topic: "orders", Timestamp: time.Now()}
			var base, eval time.Duration
			for b.Loop() {
				t0 := time.Now()
				if ok, err := bytesProg.Filter(rec); !ok || err != nil {
					b.Fatal(ok, err)
				}
				t1 := time.Now()
				if ok, err := avroProg.Filter(rec); ok != c.want || err != nil {
					b.Fatal(ok, err)
				}
				base += t1.Sub(t0)
				eval += time.Since(t1)
			}
			b.ReportMetric(float64(eval.Nanoseconds())/float64(b.N), "ns/avro-record")
			b.ReportMetric(float64(base.Nanoseconds())/float64(b.N), "ns/bytes-record")
			b.ReportMetric(float64(eval)/float64(max(base, 1)), "ratio")
		})
	}
}
