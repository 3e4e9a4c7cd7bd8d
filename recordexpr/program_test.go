package recordexpr

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func headers(kv ...string) func(func(string, []byte) bool) {
	return func(yield func(string, []byte) bool) {
		for i := 0; i+1 < len(kv); i += 2 {
			if !yield(kv[i], []byte(kv[i+1])) {
				return
			}
		}
	}
}

var ts = time.Date(2026, 12, 3, 17, 0, 0, 0, time.UTC)

func order(key, value string) *Record {
	return &Record{Key: []byte(key), Value: []byte(value), Headers: headers("type", "order.paid", "type", "order.shipped", "tenant", "acme"),
		Topic: "orders", Partition: 3, Offset: 1017, Timestamp: ts}
}

// TestFilterTable defends what each variable is and what a filter decides.
func TestFilterTable(t *testing.T) {
	paid := `{"type":"order.paid","id":12345678901234567,"amount":12.5,"items":[{"sku":"a"},{"sku":"b"}],"note":null}`
	cases := []struct {
		name   string
		spec   Spec
		rec    *Record
		want   bool
		errSub string // the evaluation fails with this in its message
		decode bool   // ... and the error is a decoding one
	}{
		{name: "utf-8 key is a string", spec: Spec{Filter: `key == 'customer-1'`}, rec: order("customer-1", "x"), want: true},
		{name: "other key", spec: Spec{Filter: `key == 'customer-1'`}, rec: order("customer-2", "x"), want: false},
		{name: "binary key is bytes", spec: Spec{Filter: `key == b'\xff\x00'`}, rec: order("\xff\x00", "x"), want: true},
		{name: "binary key never equals a string", spec: Spec{Filter: `key == '\xff'`}, rec: order("\xff", "x"), want: false},
		{name: "no key is null", spec: Spec{Filter: `key == null && key_bytes == b''`}, rec: &Record{Value: []byte("x")}, want: true},
		{name: "key_bytes", spec: Spec{Filter: `key_bytes.size() == 3`}, rec: order("abc", ""), want: true},
		{name: "headers: last value wins", spec: Spec{Filter: `headers['type'] == 'order.shipped'`}, rec: order("k", ""), want: true},
		{name: "missing header with in", spec: Spec{Filter: `'nope' in headers`}, rec: order("k", ""), want: false},
		{name: "missing header indexed", spec: Spec{Filter: `headers['nope'] == 'x'`}, rec: order("k", ""), errSub: "no such key"},
		{name: "topic partition offset", spec: Spec{Filter: `topic == 'orders' && partition == 3 && offset % 10 == 7`}, rec: order("k", ""), want: true},
		{name: "timestamp", spec: Spec{Filter: `timestamp > timestamp('2026-01-01T00:00:00Z') && timestamp.getFullYear() == 2026`}, rec: order("k", ""), want: true},
		{name: "bytes value", spec: Spec{Filter: `value.size() == 5 && string(value).startsWith('he')`}, rec: order("k", "hello"), want: true},
		{name: "bytes tombstone is empty", spec: Spec{Filter: `value == b''`}, rec: &Record{Key: []byte("k")}, want: true},
		{name: "json field", spec: Spec{Filter: `value.type == 'order.paid'`, ValueFormat: FormatJSON}, rec: order("k", paid), want: true},
		{name: "json integers exact", spec: Spec{Filter: `value.id == 12345678901234567`, ValueFormat: FormatJSON}, rec: order("k", paid), want: true},
		{name: "json double against int", spec: Spec{Filter: `value.amount > 12`, ValueFormat: FormatJSON}, rec: order("k", paid), want: true},
		{name: "json list comprehension", spec: Spec{Filter: `value.items.exists(i, i.sku == 'b')`, ValueFormat: FormatJSON}, rec: order("k", paid), want: true},
		{name: "json null", spec: Spec{Filter: `value.note == null`, ValueFormat: FormatJSON}, rec: order("k", paid), want: true},
		{name: "json has()", spec: Spec{Filter: `has(value.missing)`, ValueFormat: FormatJSON}, rec: order("k", paid), want: false},
		{name: "json optional", spec: Spec{Filter: `value.?missing.orValue('none') == 'none'`, ValueFormat: FormatJSON}, rec: order("k", paid), want: true},
		{name: "json missing field", spec: Spec{Filter: `value.missing == 'x'`, ValueFormat: FormatJSON}, rec: order("k", paid), errSub: "no such key"},
		{name: "json tombstone is null", spec: Spec{Filter: `value == null`, ValueFormat: FormatJSON}, rec: &Record{Key: []byte("k")}, want: true},
		{name: "not json", spec: Spec{Filter: `value.type == 'x'`, ValueFormat: FormatJSON}, rec: order("k", "{nope"), errSub: "value is not json", decode: true},
		{name: "json with trailing data", spec: Spec{Filter: `true || value == null`, ValueFormat: FormatJSON}, rec: order("k", `{} {}`), want: true},
		{name: "value not read is not decoded", spec: Spec{Filter: `key == 'k'`, ValueFormat: FormatJSON}, rec: order("k", "{nope"), want: true},
		{name: "json key", spec: Spec{Filter: `key.tenant == 'acme'`, KeyFormat: FormatJSON}, rec: order(`{"tenant":"acme"}`, ""), want: true},
		{name: "json key that is not json", spec: Spec{Filter: `key.tenant == 'acme'`, KeyFormat: FormatJSON}, rec: order(`acme`, ""), errSub: "key is not json", decode: true},
		{name: "dyn result not bool", spec: Spec{Filter: `value.type`, ValueFormat: FormatJSON}, rec: order("k", paid), errSub: "not a bool"},
		{name: "ext strings", spec: Spec{Filter: `headers['tenant'].upperAscii() == 'ACME'`}, rec: order("k", ""), want: true},
		{name: "no filter passes", spec: Spec{}, rec: order("k", ""), want: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := Compile(c.spec)
			if err != nil {
				t.Fatalf("Compile(%+v): %v", c.spec, err)
			}
			got, err := p.Filter(c.rec)
			switch {
			case c.errSub != "":
				if err == nil || !strings.Contains(err.Error(), c.errSub) {
					t.Fatalf("Filter = %v, %v; want an error containing %q", got, err, c.errSub)
				}
				if IsDecode(err) != c.decode {
					t.Fatalf("IsDecode(%v) = %v, want %v", err, IsDecode(err), c.decode)
				}
			case err != nil:
				t.Fatalf("Filter: %v", err)
			case got != c.want:
				t.Fatalf("Filter = %v, want %v", got, c.want)
			}
		})
	}
}

// TestCompileErrorsNameTheField defends that a bad expression is refused
// before it is stored, naming the field with CEL's position.
func TestCompileErrorsNameTheField(t *testing.T) {
	cases := []struct {
		spec      Spec
		field     string
		substring string
	}{
		{Spec{Filter: `key == `}, "filter", "filter:1:8"},
		{Spec{Filter: `nope == 'x'`}, "filter", "undeclared reference to 'nope'"},
		{Spec{Filter: `offset + 1`}, "filter", "must be a condition (type bool), not int"},
		{Spec{Filter: `   `}, "filter", "must not be blank"},
		{Spec{Filter: strings.Repeat("true && ", 1000) + "true"}, "filter", "at most 4096 bytes"},
		{Spec{Filter: `value.type == 'x'`}, "filter", "type 'bytes' does not support field selection"},
		{Spec{Transform: `offset`}, "transform", "must yield a map (sent as JSON) or a string"},
		{Spec{Transform: `{'a': `}, "transform", "transform:1:"},
		{Spec{Filter: `value.items.all(a, value.items.all(b, value.items.all(c, a == b && b == c)))`, ValueFormat: FormatJSON}, "filter", "more than the limit"},
		{Spec{ValueFormat: "xml"}, "value_format", `"xml" is unknown`},
		{Spec{KeyFormat: "yaml"}, "key_format", `"yaml" is unknown`},
	}
	for _, c := range cases {
		_, err := Compile(c.spec)
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("Compile(%+v) = %v, want an *Error", c.spec, err)
		}
		if e.Field != c.field || !strings.Contains(e.Message, c.substring) {
			t.Errorf("Compile(%+v) = %q: %q; want field %q and %q in the message", c.spec, e.Field, e.Message, c.field, c.substring)
		}
	}
}

// TestTypicalExpressionsCompile defends the cost estimate against refusing
// the expressions users write over large values.
func TestTypicalExpressionsCompile(t *testing.T) {
	for _, f := range []string{
		`value.type == 'order.paid' && value.amount > 100`,
		`value.items.exists(i, i.sku == 'b')`,
		`value.customer.email.endsWith('@example.com')`,
		`string(key).matches('^customer-[0-9]+$')`,
		`headers.exists(k, k.startsWith('x-'))`,
	} {
		if _, err := Compile(Spec{Filter: f, ValueFormat: FormatJSON}); err != nil {
			t.Errorf("Compile(%q): %v", f, err)
		}
	}
}

// TestCostLimitStopsAnEvaluation defends the runtime bound: an expression
// the estimate lets through still stops on a record larger than assumed
// (600000 items, beyond the estimate's 64 KiB).
func TestCostLimitStopsAnEvaluation(t *testing.T) {
	p, err := Compile(Spec{Filter: `value.items.exists(i, i == -1)`, ValueFormat: FormatJSON})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString(`{"items":[0`)
	for i := 1; i < 600000; i++ {
		b.WriteString(",1")
	}
	b.WriteString("]}")
	_, err = p.Filter(&Record{Value: []byte(b.String())})
	if err == nil || !strings.Contains(err.Error(), "cost limit") {
		t.Fatalf("Filter over 600000 items = %v, want the cost limit", err)
	}
}

// TestRender defends the body a delivery sends: the value as it is, JSON
// checked, or the transform's result with a stable encoding.
func TestRender(t *testing.T) {
	paid := `{"type":"order.paid","order_id":"o-1","amount":12.5,"n":12345678901234567}`
	cases := []struct {
		name   string
		spec   Spec
		rec    *Record
		want   Body
		errSub string
	}{
		{"bytes as they are", Spec{}, order("k", "\xff\x00"), Body{Value: []byte("\xff\x00")}, ""},
		{"json as it is", Spec{ValueFormat: FormatJSON}, order("k", paid), Body{Value: []byte(paid), ContentType: ContentTypeJSON}, ""},
		{"json tombstone", Spec{ValueFormat: FormatJSON}, &Record{}, Body{}, ""},
		{"not json", Spec{ValueFormat: FormatJSON}, order("k", "nope"), Body{}, "value is not json"},
		{"map transform", Spec{ValueFormat: FormatJSON, Transform: `{"total": value.amount, "id": value.order_id, "n": value.n, "key": key, "at": timestamp, "raw": key_bytes, "h": headers, "l": [1, 2u, null, true]}`},
			order("k", paid), Body{Value: []byte(`{"at":"2026-12-03T17:00:00Z","h":{"tenant":"acme","type":"order.shipped"},"id":"o-1","key":"k","l":[1,2,null,true],"n":12345678901234567,"raw":"aw==","total":12.5}`), ContentType: ContentTypeJSON}, ""},
		{"string transform", Spec{Transform: `topic + '/' + string(offset)`}, order("k", ""), Body{Value: []byte("orders/1017"), ContentType: ContentTypeText}, ""},
		{"dyn transform of the wrong type", Spec{ValueFormat: FormatJSON, Transform: `value.amount`}, order("k", paid), Body{}, "not a map or a string"},
		{"transform over a value that is not json", Spec{ValueFormat: FormatJSON, Transform: `{"a": value.a}`}, order("k", "nope"), Body{}, "value is not json"},
		{"transform error", Spec{ValueFormat: FormatJSON, Transform: `{"a": value.missing}`}, order("k", paid), Body{}, "no such key"},
		{"NaN", Spec{Transform: `{"a": 0.0/0.0}`}, order("k", ""), Body{}, "NaN"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := Compile(c.spec)
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.Render(c.rec)
			if c.errSub != "" {
				if err == nil || !strings.Contains(err.Error(), c.errSub) {
					t.Fatalf("Render = %q, %v; want an error containing %q", got.Value, err, c.errSub)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("Render (-want +got):\n%s", diff)
			}
		})
	}
}

// TestARegistryFormatWithoutARegistryWaits defends a node without a
// registry: a subscription of a registry format compiles, and its records
// are not ready (retried), never a decoding failure that would
// dead-letter them for the node's configuration.
func TestARegistryFormatWithoutARegistryWaits(t *testing.T) {
	p, err := Compile(Spec{ValueFormat: FormatAvro, Filter: `value.status == 'PAID'`})
	if err != nil {
		t.Fatal(err)
	}
	rec := &Record{Value: []byte{0, 0, 0, 0, 1, 2}}
	if _, err := p.Filter(rec); !IsNotReady(err) || IsDecode(err) {
		t.Fatalf("filter: %v, want not ready", err)
	}
	if _, err := p.Render(rec); !IsNotReady(err) || IsDecode(err) || !strings.Contains(err.Error(), "--schema-registry-url") {
		t.Fatalf("render: %v, want not ready naming --schema-registry-url", err)
	}
}
