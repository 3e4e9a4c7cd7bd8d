package api

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/keyhook/keyhook/recordexpr"
	"github.com/keyhook/keyhook/schemas"
)

// problemOf decodes a problem+json answer, failing t unless it is one
// with status.
func problemOf(t *testing.T, r response, status int) problem {
	t.Helper()
	var p problem
	if r.status != status || !strings.HasPrefix(r.header.Get("Content-Type"), "application/problem+json") || json.Unmarshal(r.body, &p) != nil {
		t.Fatalf("answer %d %s %s, want a %d problem", r.status, r.header.Get("Content-Type"), r.body, status)
	}
	return p
}

// A filter or transform that does not compile is refused at create, PUT
// and PATCH with a 400 naming the field, CEL's position in the message.
func TestFilterCompileErrorsNameTheField(t *testing.T) {
	e := newEnv(t)
	base := `"name":"n","topics":["orders"],"endpoint":{"url":"http://example.com/hook"}`
	for _, tc := range []struct {
		body, field, sub string
	}{
		{`{` + base + `,"filter":"key =="}`, "filter", "filter:1:"},
		{`{` + base + `,"filter":"value.type == 'x'"}`, "filter", "does not support field selection"},
		{`{` + base + `,"value_format":"json","transform":"offset"}`, "transform", "must yield a map"},
		{`{` + base + `,"value_format":"avro"}`, "value_format", "--schema-registry-url"},
		{`{` + base + `,"key_format":"protobuf"}`, "key_format", "--schema-registry-url"},
		{`{` + base + `,"value_format":"xml"}`, "value_format", "must be one of"},
		{`{` + base + `,"on_filter_error":"drop"}`, "on_filter_error", "must be one of"},
	} {
		p := problemOf(t, e.do(t, http.MethodPost, "/v1/subscriptions", tc.body), http.StatusBadRequest)
		if len(p.Errors) != 1 || p.Errors[0].Field != tc.field || !strings.Contains(p.Errors[0].Message, tc.sub) {
			t.Errorf("POST %s: errors %+v, want one on %s containing %q", tc.body, p.Errors, tc.field, tc.sub)
		}
	}
	sub := e.create(t, `{`+base+`,"value_format":"json","filter":"value.type == 'order.paid'"}`)
	p := problemOf(t, e.send(t, req{method: http.MethodPatch, path: "/v1/subscriptions/" + sub.ID, token: e.admin,
		header: map[string]string{"Content-Type": "application/merge-patch+json"}, body: `{"filter":"value.type =="}`}), http.StatusBadRequest)
	if len(p.Errors) != 1 || p.Errors[0].Field != "filter" {
		t.Errorf("PATCH with a bad filter: errors %+v, want one on filter", p.Errors)
	}
}

// POST /test shows what the filter and the transform make of a sample
// record, with expressions tried before they are saved.
func TestTestDeliveryFiltersAndTransforms(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, string(b))
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	sub := e.create(t, `{"name":"n","topics":["orders"],"endpoint":{"url":"`+srv.URL+`"},"value_format":"json","filter":"value.type == 'order.paid'","transform":"{'id': value.id}"}`)
	test := func(body string) TestResult {
		r := e.send(t, req{method: http.MethodPost, path: "/v1/subscriptions/" + sub.ID + "/test", token: e.writer, body: body,
			header: map[string]string{"Content-Type": "application/json"}})
		var res TestResult
		if r.status != http.StatusOK || json.Unmarshal(r.body, &res) != nil {
			t.Fatalf("POST /test %s = %d %s", body, r.status, r.body)
		}
		return res
	}
	if res := test(`{"value":{"type":"order.paid","id":"o-1"}}`); !res.Success || res.Filtered || res.Body != `{"id":"o-1"}` {
		t.Errorf("passing record: %+v, want delivered with the transformed body", res)
	}
	if res := test(`{"value":{"type":"order.shipped","id":"o-1"}}`); res.Success || !res.Filtered {
		t.Errorf("rejected record: %+v, want filtered and not sent", res)
	}
	if res := test(`{"value":{"type":"order.shipped","id":"o-2"},"filter":"value.id == 'o-2'","transform":"value.type"}`); !res.Success || res.Body != "order.shipped" {
		t.Errorf("overrides: %+v, want the override's verdict and body", res)
	}
	r := e.send(t, req{method: http.MethodPost, path: "/v1/subscriptions/" + sub.ID + "/test", token: e.writer, body: `{"filter":"value.id =="}`,
		header: map[string]string{"Content-Type": "application/json"}})
	if p := problemOf(t, r, http.StatusBadRequest); len(p.Errors) != 1 || p.Errors[0].Field != "filter" {
		t.Errorf("bad override: %+v, want one error on filter", p.Errors)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Errorf("endpoint got %d requests %q, want 2 (a filtered test sends none)", len(got), got)
	}
}

// With a Schema Registry, an avro subscription is accepted, and POST
// /test decodes a wire-format sample (value_base64) with the registry's
// schema before filtering and transforming it; a sample whose schema id
// the registry does not know says so.
func TestTestDeliveryDecodesAvroWithTheRegistry(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	const schema = `{"type":"record","name":"Order","fields":[{"name":"order_id","type":"string"},{"name":"status","type":"string"}]}`
	id, _, err := reg.RegisterSchema("orders-value", sr.Schema{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	registry, err := schemas.New(schemas.Config{URL: reg.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer registry.Close()
	e := newEnvWith(t, envOptions{config: func(c *Config) { c.SchemaRegistry = true }, tester: []recordexpr.Option{recordexpr.WithSchemas(registry)}})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(srv.Close)
	sub := e.create(t, `{"name":"n","topics":["orders"],"endpoint":{"url":"`+srv.URL+`"},"value_format":"avro","filter":"value.status == 'PAID'","transform":"{'id': value.order_id}"}`)
	wire := func(id int, status string) string {
		b, err := avro.Marshal(avro.MustParse(schema), map[string]any{"order_id": "o-1", "status": status})
		if err != nil {
			t.Fatal(err)
		}
		var h sr.ConfluentHeader
		out, _ := h.AppendEncode(nil, id, nil)
		return base64.StdEncoding.EncodeToString(append(out, b...))
	}
	test := func(value string) TestResult {
		r := e.send(t, req{method: http.MethodPost, path: "/v1/subscriptions/" + sub.ID + "/test", token: e.writer,
			body: `{"value_base64":"` + value + `"}`, header: map[string]string{"Content-Type": "application/json"}})
		var res TestResult
		if r.status != http.StatusOK || json.Unmarshal(r.body, &res) != nil {
			t.Fatalf("POST /test = %d %s", r.status, r.body)
		}
		return res
	}
	if res := test(wire(id, "PAID")); !res.Success || res.Body != `{"id":"o-1"}` {
		t.Errorf("a paid order: %+v, want delivered with the transformed body", res)
	}
	if res := test(wire(id, "NEW")); !res.Filtered {
		t.Errorf("a new order: %+v, want filtered", res)
	}
	if res := test(wire(999, "PAID")); res.Success || !strings.Contains(res.Error, "schema id 999 is unknown") {
		t.Errorf("an unknown schema id: %+v, want the error", res)
	}
}
