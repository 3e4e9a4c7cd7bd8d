package schemas

import (
	"context"
	"errors"
	"math/big"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/keyhook/keyhook/internal/backoff"
	"github.com/keyhook/keyhook/recordexpr"
)

const orderSchema = `{"type":"record","name":"Order","namespace":"shop","fields":[
	{"name":"order_id","type":"string"},
	{"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},
	{"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","PAID"]}},
	{"name":"note","type":["null","string"],"default":null},
	{"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
	{"name":"tags","type":{"type":"map","values":"long"}}]}`

// wire encodes v with the Avro schema text in the Confluent wire format
// under id.
func wire(t testing.TB, id int, schema string, v any) []byte {
	t.Helper()
	b, err := avro.Marshal(avro.MustParse(schema), v)
	if err != nil {
		t.Fatal(err)
	}
	var h sr.ConfluentHeader
	out, _ := h.AppendEncode(nil, id, nil)
	return append(out, b...)
}

func newRegistry(t testing.TB, reg *srfake.Registry) *Registry {
	t.Helper()
	r, err := New(Config{URL: reg.URL(), Backoff: backoff.Config{Initial: time.Millisecond, Max: 5 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

func order(t testing.TB, id int) []byte {
	return wire(t, id, orderSchema, map[string]any{
		"order_id": "o-1", "amount": avroDecimal(1250), "status": "PAID", "note": map[string]any{"string": "gift"},
		"at": time.UnixMilli(1764781200123).UTC(), "tags": map[string]any{"a": int64(1)},
	})
}

// TestDecodeAnswersFromTheCacheAndNeverWaits defends the worker's side:
// the first record of a schema is not ready (its fetch starts), the
// records after it decode once the fetch is done, to the documented JSON.
func TestDecodeAnswersFromTheCacheAndNeverWaits(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	id, _, err := reg.RegisterSchema("orders-value", sr.Schema{Schema: orderSchema})
	if err != nil {
		t.Fatal(err)
	}
	r := newRegistry(t, reg)
	d := r.Decoder(recordexpr.FormatAvro)
	b := order(t, id)
	if _, err := d.Decode(b); !errors.Is(err, recordexpr.ErrNotReady) {
		t.Fatalf("first decode: %v, want ErrNotReady", err)
	}
	if err := d.(recordexpr.Waiter).Wait(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	p, err := recordexpr.Compile(recordexpr.Spec{ValueFormat: recordexpr.FormatAvro, Filter: `value.status == 'PAID' && value.note == 'gift' && value.tags.a == 1`}, recordexpr.WithSchemas(r))
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordexpr.Record{Value: b}
	if ok, err := p.Filter(rec); !ok || err != nil {
		t.Fatalf("filter: %v %v", ok, err)
	}
	body, err := p.Render(rec)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"amount":"12.50","at":"2025-12-03T17:00:00.123Z","note":"gift","order_id":"o-1","status":"PAID","tags":{"a":1}}`
	if string(body.Value) != want || body.Schema != reg.URL()+"/schemas/ids/1" {
		t.Fatalf("body %s schema %q\nwant %s", body.Value, body.Schema, want)
	}
}

func avroDecimal(unscaled int64) any {
	return new(big.Rat).SetFrac64(unscaled, 100)
}

// TestUndecodableRecordsAreDecodeErrors defends the dead-letter side: a
// bad magic byte, a short header, an id the registry does not know and a
// payload that does not match its schema are decoding failures, not
// waits.
func TestUndecodableRecordsAreDecodeErrors(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	id, _, _ := reg.RegisterSchema("orders-value", sr.Schema{Schema: orderSchema})
	r := newRegistry(t, reg)
	d := r.Decoder(recordexpr.FormatAvro)
	good := order(t, id)
	if err := d.(recordexpr.Waiter).Wait(context.Background(), good); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"magic byte":   append([]byte{1}, good[1:]...),
		"short header": {0, 0, 1},
		"unknown id":   order(t, 999),
		"truncated":    good[:len(good)-3],
	} {
		t.Run(name, func(t *testing.T) {
			p, _ := recordexpr.Compile(recordexpr.Spec{ValueFormat: recordexpr.FormatAvro}, recordexpr.WithSchemas(r))
			rec := &recordexpr.Record{Value: b}
			if err := p.Wait(context.Background(), rec); err != nil && !recordexpr.IsDecode(err) {
				t.Fatalf("wait: %v, want a decoding error or none", err)
			}
			_, err := p.Render(rec)
			if !recordexpr.IsDecode(err) || recordexpr.IsNotReady(err) {
				t.Fatalf("render: %v, want a decoding error", err)
			}
			t.Log(err)
		})
	}
	if _, err := d.Decode(order(t, id)); err != nil {
		t.Fatalf("the cached schema still decodes: %v", err)
	}
}

// TestARegistryDownIsWaitedForAndCachedSchemasFlow defends the outage:
// requests failing with 503 are retried with backoff and counted, the
// schemas cached before keep decoding, and a schema fetched during the
// outage arrives once the registry answers again.
func TestARegistryDownIsWaitedForAndCachedSchemasFlow(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	id1, _, _ := reg.RegisterSchema("orders-value", sr.Schema{Schema: orderSchema})
	id2, _, _ := reg.RegisterSchema("other-value", sr.Schema{Schema: `{"type":"record","name":"Other","fields":[{"name":"x","type":"long"}]}`})
	r := newRegistry(t, reg)
	d := r.Decoder(recordexpr.FormatAvro)
	if err := d.(recordexpr.Waiter).Wait(context.Background(), order(t, id1)); err != nil {
		t.Fatal(err)
	}
	var down atomic.Bool
	var failed atomic.Int64
	down.Store(true)
	reg.Intercept(func(w http.ResponseWriter, _ *http.Request) bool {
		if down.Load() {
			failed.Add(1)
			http.Error(w, `{"error_code":50003,"message":"down"}`, http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	other := wire(t, id2, `{"type":"record","name":"Other","fields":[{"name":"x","type":"long"}]}`, map[string]any{"x": int64(7)})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	err := d.(recordexpr.Waiter).Wait(ctx, other)
	cancel()
	if !errors.Is(err, recordexpr.ErrNotReady) || recordexpr.IsDecode(err) {
		t.Fatalf("wait during the outage: %v, want not ready", err)
	}
	if since, oerr := r.Outage(); since.IsZero() || oerr == nil {
		t.Fatal("the outage is not reported")
	}
	if _, err := d.Decode(order(t, id1)); err != nil {
		t.Fatalf("a cached schema during the outage: %v", err)
	}
	if failed.Load() < 2 {
		t.Fatalf("%d failed requests: the fetch is not retried", failed.Load())
	}
	down.Store(false)
	if err := d.(recordexpr.Waiter).Wait(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	if v, err := d.Decode(other); err != nil || string(mustJSON(t, v)) != `{"x":7}` {
		t.Fatalf("after the outage: %v", err)
	}
	if since, _ := r.Outage(); !since.IsZero() {
		t.Fatal("the outage is still reported")
	}
}

func mustJSON(t *testing.T, d recordexpr.Decoded) []byte {
	t.Helper()
	b, err := recordexpr.EncodeJSON(d.Val)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
