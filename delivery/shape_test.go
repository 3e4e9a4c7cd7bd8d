package delivery_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/keyhook/keyhook/delivery"
	"github.com/keyhook/keyhook/recordexpr"
	"github.com/keyhook/keyhook/webhooks"
)

// fakeSchemas decodes every registry format the same way: a value "wait"
// is not ready (its schema not cached), "bad" does not decode, any other
// is the JSON object {"status": <value>}, decoded with schema 7.
type fakeSchemas struct{}

func (fakeSchemas) Decoder(recordexpr.Format) recordexpr.Decoder { return fakeDecoder{} }

type fakeDecoder struct{}

func (fakeDecoder) Decode(b []byte) (recordexpr.Decoded, error) {
	switch string(b) {
	case "wait":
		return recordexpr.Decoded{}, recordexpr.ErrNotReady
	case "bad":
		return recordexpr.Decoded{}, errors.New("magic byte is 0x01")
	}
	d, err := recordexpr.DecodeJSON([]byte(`{"status":"` + string(b) + `"}`))
	d.Schema = "http://registry:8081/schemas/ids/7"
	return d, err
}

// TestShapeOfARegistryFormat defends what a delivery makes of a record of
// a registry format: filtered at delivery (ErrFiltered, to ack unsent),
// not ready (neither final nor filtered: shaped again later), not
// decodable (final), and, passed, the decoded JSON with the schema as the
// CloudEvents dataschema.
func TestShapeOfARegistryFormat(t *testing.T) {
	sub := newSub(t, "http://example.com/hook")
	sub.ValueFormat, sub.Filter, sub.Format = "avro", `value.status == 'PAID'`, "cloudevents-binary"
	ep := delivery.New(sub, webhooks.RetryPolicy{}, recordexpr.WithSchemas(fakeSchemas{}))
	shape := func(value string) (*webhooks.Message, error) {
		m := message()
		m.Value, m.ContentType = []byte(value), ""
		return m, ep.Shape(m, &recordexpr.Record{Value: []byte(value)})
	}
	if _, err := shape("NEW"); !errors.Is(err, delivery.ErrFiltered) {
		t.Errorf("a record the filter rejects: %v, want ErrFiltered", err)
	}
	if _, err := shape("wait"); !recordexpr.IsNotReady(err) || errors.Is(err, webhooks.ErrInvalidMessage) || errors.Is(err, delivery.ErrFiltered) {
		t.Errorf("a record whose schema is not cached: %v, want not ready, neither final nor filtered", err)
	}
	if _, err := shape("bad"); !errors.Is(err, webhooks.ErrInvalidMessage) || !strings.Contains(err.Error(), "magic byte") {
		t.Errorf("a record that does not decode: %v, want final with the reason", err)
	}
	m, err := shape("PAID")
	if err != nil {
		t.Fatal(err)
	}
	req, err := ep.Render(m)
	if err != nil {
		t.Fatal(err)
	}
	if got := req.Header.Get("Ce-Dataschema"); got != "http://registry:8081/schemas/ids/7" {
		t.Errorf("ce-dataschema %q, want the schema's URI", got)
	}
	if req.ContentType != "application/json" || !json.Valid(req.Body) || string(req.Body) != `{"status":"PAID"}` {
		t.Errorf("body %s (%s), want the decoded value as JSON", req.Body, req.ContentType)
	}
}
