package api

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestBadInputGetsAProblemAndChangesNothing sends every route malformed
// JSON, wrong types, unknown fields, out-of-range numbers, bad URLs,
// oversized bodies and bad query parameters, and checks each answer's
// problem and that not one Redis key changed.
func TestBadInputGetsAProblemAndChangesNothing(t *testing.T) {
	e := newEnv(t)
	sub := e.create(t, validBody)
	e.create(t, `{"name":"second","topics":["payments"],"endpoint":{"url":"https://p.example/"}}`)
	id := "/v1/subscriptions/" + sub.ID
	withField := func(extra string) string { return strings.TrimSuffix(validBody, "}") + "," + extra + "}" }
	oversized := `{"name":"` + strings.Repeat("x", DefaultMaxBodyBytes) + `"}`
	json := map[string]string{"Content-Type": "application/json"}

	tests := []struct {
		name         string
		method, path string
		header       map[string]string
		body         string
		status       int
		slug         string
		fields       []string
	}{
		// create
		{name: "create: empty body", method: "POST", path: "/v1/subscriptions", body: "", status: 400, slug: slugInvalidJSON},
		{name: "create: truncated JSON", method: "POST", path: "/v1/subscriptions", body: `{"name":"x","topics":[`, status: 400, slug: slugInvalidJSON},
		{name: "create: malformed JSON", method: "POST", path: "/v1/subscriptions", body: `{"name" "x"}`, status: 400, slug: slugInvalidJSON},
		{name: "create: not an object", method: "POST", path: "/v1/subscriptions", body: `["orders"]`, status: 400, slug: slugInvalidJSON},
		{name: "create: null body", method: "POST", path: "/v1/subscriptions", body: `null`, status: 400, slug: slugInvalidJSON},
		{name: "create: trailing data", method: "POST", path: "/v1/subscriptions", body: validBody + ` {}`, status: 400, slug: slugInvalidJSON},
		{name: "create: wrong type", method: "POST", path: "/v1/subscriptions", body: withField(`"max_in_flight":"x"`), status: 400, slug: slugInvalidJSON, fields: []string{"max_in_flight"}},
		{name: "create: wrong nested type", method: "POST", path: "/v1/subscriptions", body: `{"endpoint":{"timeout_ms":"5s"}}`, status: 400, slug: slugInvalidJSON, fields: []string{"endpoint.timeout_ms"}},
		{name: "create: wrong element type", method: "POST", path: "/v1/subscriptions", body: `{"topics":["a",1]}`, status: 400, slug: slugInvalidJSON, fields: []string{"topics"}},
		{name: "create: wrong boolean", method: "POST", path: "/v1/subscriptions", body: withField(`"paused":"yes"`), status: 400, slug: slugInvalidJSON, fields: []string{"paused"}},
		{name: "create: number out of range", method: "POST", path: "/v1/subscriptions", body: `{"max_in_flight":1e40}`, status: 400, slug: slugInvalidJSON, fields: []string{"max_in_flight"}},
		{name: "create: max_in_flight above the limit", method: "POST", path: "/v1/subscriptions", body: strings.Replace(validBody, `"max_in_flight":10`, `"max_in_flight":100001`, 1), status: 400, slug: slugValidation, fields: []string{"max_in_flight"}},
		{name: "create: unknown field", method: "POST", path: "/v1/subscriptions", body: withField(`"colour":"red"`), status: 400, slug: slugUnknownField, fields: []string{"colour"}},
		{name: "create: unknown fields named by path", method: "POST", path: "/v1/subscriptions", body: `{"extra":1,"endpoint":{"url":"https://h.example","secret":"s"}}`, status: 400, slug: slugUnknownField, fields: []string{"extra", "endpoint.secret"}},
		{name: "create: read-only fields", method: "POST", path: "/v1/subscriptions", body: withField(`"id":"sub_mine","created_at":"2020-01-01T00:00:00Z","version":7`), status: 400, slug: slugValidation, fields: []string{"id", "created_at", "version"}},
		{name: "create: read-only even when null", method: "POST", path: "/v1/subscriptions", body: withField(`"updated_at":null`), status: 400, slug: slugValidation, fields: []string{"updated_at"}},
		{name: "create: unknown ordering", method: "POST", path: "/v1/subscriptions", body: `{"name":"n","topics":["t"],"endpoint":{"url":"https://h.example"},"ordering":"random"}`, status: 400, slug: slugValidation, fields: []string{"ordering"}},
		{name: "create: conflate with ordering none", method: "POST", path: "/v1/subscriptions", body: `{"name":"n","topics":["t"],"endpoint":{"url":"https://h.example"},"ordering":"none","conflate":true}`, status: 400, slug: slugValidation, fields: []string{"conflate"}},
		{name: "create: conflate not a boolean", method: "POST", path: "/v1/subscriptions", body: `{"name":"n","topics":["t"],"endpoint":{"url":"https://h.example"},"conflate":"yes"}`, status: 400, slug: slugInvalidJSON, fields: []string{"conflate"}},
		{name: "create: unknown sharing", method: "POST", path: "/v1/subscriptions", body: `{"name":"n","topics":["t"],"endpoint":{"url":"https://h.example"},"sharing":"always"}`, status: 400, slug: slugValidation, fields: []string{"sharing"}},
		{name: "create: every validation problem at once", method: "POST", path: "/v1/subscriptions", body: `{"topics":["ok","ok"],"endpoint":{"url":"ftp://x"},"start":"now"}`, status: 400, slug: slugValidation, fields: []string{"name", "topics[1]", "endpoint.url", "start"}},
		{name: "create: bad URL", method: "POST", path: "/v1/subscriptions", body: `{"name":"n","topics":["t"],"endpoint":{"url":"https://user:pw@h.example/"}}`, status: 400, slug: slugValidation, fields: []string{"endpoint.url"}},
		{name: "create: forbidden URL", method: "POST", path: "/v1/subscriptions", body: `{"name":"n","topics":["t"],"endpoint":{"url":"https://internal.blocked.test/hook"}}`, status: 400, slug: slugForbiddenEndpoint, fields: []string{"endpoint.url"}},
		{name: "create: oversized body", method: "POST", path: "/v1/subscriptions", body: oversized, status: 413, slug: slugBodyTooLarge},
		{name: "create: wrong content type", method: "POST", path: "/v1/subscriptions", header: map[string]string{"Content-Type": "text/plain"}, body: validBody, status: 415, slug: slugUnsupportedMediaType},
		{name: "create: JSON in another charset", method: "POST", path: "/v1/subscriptions", header: map[string]string{"Content-Type": "application/json; charset=latin1"}, body: validBody, status: 415, slug: slugUnsupportedMediaType},
		{name: "create: unparsable content type", method: "POST", path: "/v1/subscriptions", header: map[string]string{"Content-Type": "application/json;;"}, body: validBody, status: 415, slug: slugUnsupportedMediaType},
		{name: "create: empty idempotency key", method: "POST", path: "/v1/subscriptions", header: map[string]string{"Idempotency-Key": " "}, body: validBody, status: 400, slug: slugInvalidHeader, fields: []string{"Idempotency-Key"}},
		{name: "create: idempotency key too long", method: "POST", path: "/v1/subscriptions", header: map[string]string{"Idempotency-Key": strings.Repeat("k", 256)}, body: validBody, status: 400, slug: slugInvalidHeader, fields: []string{"Idempotency-Key"}},
		{name: "create: bad body with a key records nothing", method: "POST", path: "/v1/subscriptions", header: map[string]string{"Idempotency-Key": "k1"}, body: `{"name":"","topics":["t"],"endpoint":{"url":"https://h.example"}}`, status: 400, slug: slugValidation, fields: []string{"name"}},

		// list
		{name: "list: limit not a number", method: "GET", path: "/v1/subscriptions?limit=ten", status: 400, slug: slugInvalidQuery, fields: []string{"limit"}},
		{name: "list: limit zero", method: "GET", path: "/v1/subscriptions?limit=0", status: 400, slug: slugInvalidQuery, fields: []string{"limit"}},
		{name: "list: limit above the maximum", method: "GET", path: "/v1/subscriptions?limit=1001", status: 400, slug: slugInvalidQuery, fields: []string{"limit"}},
		{name: "list: forged cursor", method: "GET", path: "/v1/subscriptions?cursor=abc", status: 400, slug: slugInvalidQuery, fields: []string{"cursor"}},
		{name: "list: unknown and repeated parameters", method: "GET", path: "/v1/subscriptions?limt=5&topic=a&topic=b", status: 400, slug: slugInvalidQuery, fields: []string{"limt", "topic"}},

		// replace
		{name: "replace: malformed JSON", method: "PUT", path: id, body: `{"name":`, status: 400, slug: slugInvalidJSON},
		{name: "replace: unknown field", method: "PUT", path: id, body: withField(`"owner":"me"`), status: 400, slug: slugUnknownField, fields: []string{"owner"}},
		{name: "replace: read-only field", method: "PUT", path: id, body: withField(`"id":"` + sub.ID + `"`), status: 400, slug: slugValidation, fields: []string{"id"}},
		{name: "replace: wrong type", method: "PUT", path: id, body: withField(`"topics":"orders"`), status: 400, slug: slugInvalidJSON, fields: []string{"topics"}},
		{name: "replace: out of range", method: "PUT", path: id, body: strings.Replace(validBody, `"timeout_ms":5000`, `"timeout_ms":600001`, 1), status: 400, slug: slugValidation, fields: []string{"endpoint.timeout_ms"}},
		{name: "replace: bad URL", method: "PUT", path: id, body: strings.Replace(validBody, `https://billing.example.com/hook`, `billing.example.com`, 1), status: 400, slug: slugValidation, fields: []string{"endpoint.url"}},
		{name: "replace: oversized body", method: "PUT", path: id, body: oversized, status: 413, slug: slugBodyTooLarge},
		{name: "replace: stale If-Match", method: "PUT", path: id, header: map[string]string{"If-Match": `"` + sub.ID + `.v7"`}, body: validBody, status: 412, slug: slugPreconditionFailed},
		{name: "replace: weak If-Match never matches", method: "PUT", path: id, header: map[string]string{"If-Match": `W/"` + sub.ID + `.v1"`}, body: validBody, status: 412, slug: slugPreconditionFailed},

		// patch
		{name: "patch: malformed JSON", method: "PATCH", path: id, body: `{"name":}`, status: 400, slug: slugInvalidJSON},
		{name: "patch: not an object", method: "PATCH", path: id, body: `"name"`, status: 400, slug: slugInvalidJSON},
		{name: "patch: unknown field", method: "PATCH", path: id, body: `{"owner":"me"}`, status: 400, slug: slugUnknownField, fields: []string{"owner"}},
		{name: "patch: out of range", method: "PATCH", path: id, body: `{"max_in_flight":-1}`, status: 400, slug: slugValidation, fields: []string{"max_in_flight"}},
		{name: "patch: oversized body", method: "PATCH", path: id, body: oversized, status: 413, slug: slugBodyTooLarge},
		{name: "patch: stale If-Match", method: "PATCH", path: id, header: map[string]string{"If-Match": `"` + sub.ID + `.v0"`}, body: `{}`, status: 412, slug: slugPreconditionFailed},
		{name: "patch: another subscription's ETag", method: "PATCH", path: id, header: map[string]string{"If-Match": `"sub_other.v1"`}, body: `{}`, status: 412, slug: slugPreconditionFailed},

		// delete, pause, resume
		{name: "delete: stale If-Match", method: "DELETE", path: id, header: map[string]string{"If-Match": `"` + sub.ID + `.v2"`}, status: 412, slug: slugPreconditionFailed},
		{name: "pause: stale If-Match", method: "POST", path: id + "/pause", header: map[string]string{"If-Match": `"x"`}, status: 412, slug: slugPreconditionFailed},
		{name: "resume: stale If-Match", method: "POST", path: id + "/resume", header: map[string]string{"If-Match": `"x"`}, status: 412, slug: slugPreconditionFailed},

		// seek
		{name: "seek: empty body", method: "POST", path: id + "/seek", body: ``, status: 400, slug: slugInvalidJSON},
		{name: "seek: malformed JSON", method: "POST", path: id + "/seek", body: `{"to":`, status: 400, slug: slugInvalidJSON},
		{name: "seek: unknown field", method: "POST", path: id + "/seek", body: `{"to":"earliest","force":true}`, status: 400, slug: slugUnknownField, fields: []string{"force"}},
		{name: "seek: unknown nested field", method: "POST", path: id + "/seek", body: `{"to":"offsets","offsets":[{"topic":"orders","partition":0,"offset":1,"epoch":3}]}`, status: 400, slug: slugUnknownField, fields: []string{"offsets[0].epoch"}},
		{name: "seek: wrong type", method: "POST", path: id + "/seek", body: `{"to":"offsets","offsets":[{"topic":"orders","partition":"0","offset":1}]}`, status: 400, slug: slugInvalidJSON, fields: []string{"offsets.partition"}},
		{name: "seek: partition out of range", method: "POST", path: id + "/seek", body: `{"to":"offsets","offsets":[{"topic":"orders","partition":4294967296,"offset":1}]}`, status: 400, slug: slugInvalidJSON, fields: []string{"offsets.partition"}},
		{name: "seek: unknown target", method: "POST", path: id + "/seek", body: `{"to":"yesterday"}`, status: 400, slug: slugValidation, fields: []string{"to"}},
		{name: "seek: bad timestamp", method: "POST", path: id + "/seek", body: `{"to":"timestamp","timestamp":"yesterday"}`, status: 400, slug: slugValidation, fields: []string{"timestamp"}},
		{name: "seek: missing timestamp", method: "POST", path: id + "/seek", body: `{"to":"timestamp"}`, status: 400, slug: slugValidation, fields: []string{"timestamp"}},
		{name: "seek: offsets outside the subscription", method: "POST", path: id + "/seek", body: `{"to":"offsets","offsets":[{"topic":"payments","partition":-1,"offset":-5},{"topic":"orders","partition":0,"offset":0},{"topic":"orders","partition":0,"offset":9}]}`, status: 400, slug: slugValidation, fields: []string{"offsets[0].topic", "offsets[0].partition", "offsets[0].offset", "offsets[2]"}},
		{name: "seek: oversized body", method: "POST", path: id + "/seek", body: oversized, status: 413, slug: slugBodyTooLarge},
		{name: "seek: wrong content type", method: "POST", path: id + "/seek", header: map[string]string{"Content-Type": "text/plain"}, body: `{"to":"earliest"}`, status: 415, slug: slugUnsupportedMediaType},

		// test delivery
		{name: "test: malformed JSON", method: "POST", path: id + "/test", body: `{"value":`, status: 400, slug: slugInvalidJSON},
		{name: "test: unknown field", method: "POST", path: id + "/test", body: `{"value":1,"headers":{}}`, status: 400, slug: slugUnknownField, fields: []string{"headers"}},
		{name: "test: wrong type", method: "POST", path: id + "/test", body: `{"key":5}`, status: 400, slug: slugInvalidJSON, fields: []string{"key"}},
		{name: "test: key too long", method: "POST", path: id + "/test", body: `{"key":"` + strings.Repeat("k", MaxTestKeyBytes+1) + `"}`, status: 400, slug: slugValidation, fields: []string{"key"}},
		{name: "test: oversized body", method: "POST", path: id + "/test", body: oversized, status: 413, slug: slugBodyTooLarge},

		// dead letters
		{name: "dead letters: limit out of range", method: "GET", path: id + "/dead-letters?limit=100000", status: 400, slug: slugInvalidQuery, fields: []string{"limit"}},
		{name: "dead letters: forged cursor", method: "GET", path: id + "/dead-letters?cursor=nope", status: 400, slug: slugInvalidQuery, fields: []string{"cursor"}},
		{name: "dead letters: unknown parameter", method: "GET", path: id + "/dead-letters?status=500", status: 400, slug: slugInvalidQuery, fields: []string{"status"}},
		{name: "redrive: neither ids nor all", method: "POST", path: id + "/dead-letters/redrive", body: `{}`, status: 400, slug: slugValidation, fields: []string{"ids"}},
		{name: "redrive: both ids and all", method: "POST", path: id + "/dead-letters/redrive", body: `{"ids":["a"],"all":true}`, status: 400, slug: slugValidation, fields: []string{"ids"}},
		{name: "redrive: bad ids", method: "POST", path: id + "/dead-letters/redrive", body: `{"ids":["a","","a"]}`, status: 400, slug: slugValidation, fields: []string{"ids[1]", "ids[2]"}},
		{name: "redrive: wrong type", method: "POST", path: id + "/dead-letters/redrive", body: `{"all":"yes"}`, status: 400, slug: slugInvalidJSON, fields: []string{"all"}},
		{name: "redrive: unknown field", method: "POST", path: id + "/dead-letters/redrive", body: `{"all":true,"topic":"x"}`, status: 400, slug: slugUnknownField, fields: []string{"topic"}},
		{name: "redrive: oversized body", method: "POST", path: id + "/dead-letters/redrive", body: oversized, status: 413, slug: slugBodyTooLarge},
	}
	before := e.snapshot(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			header := json
			if tt.header != nil {
				header = map[string]string{"Content-Type": "application/json"}
				for k, v := range tt.header {
					header[k] = v
				}
			}
			r := e.send(t, req{method: tt.method, path: tt.path, token: e.admin, header: header, body: tt.body})
			p := wantProblem(t, r, tt.status, tt.slug)
			if tt.fields != nil || tt.slug == slugValidation || tt.slug == slugUnknownField {
				if diff := cmp.Diff(tt.fields, fields(p)); diff != "" {
					t.Errorf("errors[].field (-want +got):\n%s\nproblem: %s", diff, r.body)
				}
			}
			for _, fe := range p.Errors {
				if fe.Message == "" {
					t.Errorf("field error %q has no message", fe.Field)
				}
			}
			e.unchanged(t, before)
		})
	}
	if n := len(e.seeker.requests()); n != 0 {
		t.Errorf("the seeker was called %d times for bad seeks", n)
	}
	if len(e.dead.redriven) != 0 {
		t.Errorf("redrive was called for bad requests: %v", e.dead.redriven)
	}
}
