package api

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keyhook/keyhook/subscription"
)

// fuzzRouter is a router over a real Redis, for fuzz targets; it calls
// handlers in process, without a server.
func fuzzRouter(f *testing.F) (*env, http.Handler) {
	e := newEnv(f)
	h, err := NewRouter(Dependencies{Store: e.store, URLs: refusingChecker{}, Status: e.status, Seeker: e.seeker, Starts: e.starts,
		DeadLetters: e.dead, Tester: &WebhookTester{}, Nodes: e.nodes, Auth: e.tokens, Keys: e.keys},
		Config{MaxBodyBytes: 4096, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	return e, h
}

func (e *env) serve(h http.Handler, method, path, contentType string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Authorization", "Bearer "+e.admin)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// checkProblem fails unless rec is a 4xx problem+json.
func checkProblem(t *testing.T, rec *httptest.ResponseRecorder, body []byte) {
	t.Helper()
	var p problem
	if rec.Code < 400 || rec.Code >= 500 || rec.Header().Get("Content-Type") != "application/problem+json" ||
		json.Unmarshal(rec.Body.Bytes(), &p) != nil || p.Status != rec.Code || !strings.HasPrefix(p.Type, problemTypeBase) {
		t.Fatalf("body %q: answer %d %q %s is not a 4xx problem", body, rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
}

var fuzzSeeds = []string{
	validBody,
	`{"name":"n","topics":["t"],"endpoint":{"url":"http://h.example"}}`,
	`{"name":"n","topics":["t"],"endpoint":{"url":"http://x.blocked.test"}}`,
	`{"NAME":"n","Topics":["t"],"endpoint":{"URL":"http://h.example"}}`,
	`{"endpoint":{"x":{"y":[1,{"z":2}]}}}`, `{"paused":true}`, `{"endpoint":null}`,
	`{"id":null}`, `{"max_in_flight":-1}`, `{"topics":[1]}`, `{"a":1} x`, `{`, `[]`, ``, `"\ud800"`,
	`{"name":"n","topics":["t"],"endpoint":{"url":"http://h.example","timeout_ms":0.0},"max_in_flight":1e2}`,
	`{"name":"n","topics":["t"],"endpoint":{"url":"http://h.example"},"paused":null}`,
	`{"name":"n","topics":["t"],"endpoint":{"url":"http://h.example"},"retry":{"max_elapsed_ms":18446744073710}}`,
	`{"name":"n","topics":["t"],"endpoint":{"url":"http://h.example"},"max_in_flight":1e999999999}`,
	`{"name":"\u001b[31m","topics":["t"],"endpoint":{"url":"http://h.example"},"content_type":"a/b\r\nX: y"}`,
	`{"name":"n","topics":["t"],"endpoint":{"url":"http://h.example","keep_credentials":true},"dead_letter_topic":"__consumer_offsets"}`,
	`{"name":"n","topics":["t",null],"endpoint":{"url":"http://h.example","auth":{"headers":{"X-K":null}}}}`,
}

// FuzzCanonicalKeepsMeaning defends the rewrite that makes the decoder
// read numbers and null as JSON Schema does: it refuses only bodies with
// a null, and otherwise changes no value, only how integral numbers are
// written, so a body the decoder took before decodes to the same
// subscription after.
func FuzzCanonicalKeepsMeaning(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	subType := reflect.TypeFor[subscription.Subscription]()
	f.Fuzz(func(t *testing.T, body []byte) {
		if !json.Valid(body) {
			return
		}
		out, p := canonical(body, subType)
		if p != nil {
			if p.Status != http.StatusBadRequest || len(p.Errors) == 0 || !bytes.Contains(body, []byte("null")) {
				t.Fatalf("body %q: refused with %+v", body, p)
			}
			return
		}
		if !json.Valid(out) {
			t.Fatalf("body %q: rewritten into invalid JSON %q", body, out)
		}
		var before, after any
		if json.Unmarshal(body, &before) == nil {
			if err := json.Unmarshal(out, &after); err != nil {
				t.Fatalf("body %q: rewritten %q does not decode: %v", body, out, err)
			}
			if diff := cmp.Diff(before, after); diff != "" {
				t.Fatalf("body %q: rewriting changed a value (-before +after):\n%s", body, diff)
			}
		}
		var sb, sa subscription.Subscription
		if json.Unmarshal(body, &sb) == nil {
			if err := json.Unmarshal(out, &sa); err != nil {
				t.Fatalf("body %q decoded, its rewrite %q does not: %v", body, out, err)
			}
			if diff := cmp.Diff(sb, sa); diff != "" {
				t.Fatalf("body %q: the rewrite decodes differently (-before +after):\n%s", body, diff)
			}
		}
	})
}

// FuzzCreateRequest defends the create decoder's contract: whatever the
// bytes, the answer is 201 with the stored subscription, or a 4xx problem
// that stored nothing; never a panic, a 5xx, or another shape.
func FuzzCreateRequest(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	e, h := fuzzRouter(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		before, err := e.rdb.HLen(context.Background(), "keyhook:subscriptions").Result()
		if err != nil {
			t.Fatal(err)
		}
		rec := e.serve(h, http.MethodPost, "/v1/subscriptions", "application/json", body)
		after, err := e.rdb.HLen(context.Background(), "keyhook:subscriptions").Result()
		if err != nil {
			t.Fatal(err)
		}
		if rec.Code == http.StatusCreated {
			var sub subscription.Subscription
			if err := json.Unmarshal(rec.Body.Bytes(), &sub); err != nil || sub.ID == "" {
				t.Fatalf("201 body %s: %v", rec.Body, err)
			}
			if after != before+1 {
				t.Fatalf("201 but store went from %d to %d", before, after)
			}
			stored, err := e.store.Get(context.Background(), sub.ID)
			if err != nil {
				t.Fatal(err)
			}
			if errs := stored.Validate(); len(errs) > 0 || stored.Endpoint.KeepCredentials {
				t.Fatalf("body %q stored an invalid subscription (%v) or a request-only field", body, errs)
			}
			return
		}
		checkProblem(t, rec, body)
		if after != before {
			t.Fatalf("%d but store went from %d to %d", rec.Code, before, after)
		}
	})
}

// FuzzPatchRequest defends the merge-patch decoder: whatever the bytes,
// the answer is 200 with what is now stored, or a 4xx problem with the
// subscription unchanged.
func FuzzPatchRequest(f *testing.F) {
	for _, s := range append(fuzzSeeds, `{"topics":null}`, `{"endpoint":{"url":null}}`, `{"ordering":null,"name":"x"}`) {
		f.Add([]byte(s))
	}
	e, h := fuzzRouter(f)
	sub := e.create(f, validBody)
	f.Fuzz(func(t *testing.T, body []byte) {
		before, err := e.store.Get(context.Background(), sub.ID)
		if err != nil {
			t.Fatal(err)
		}
		rec := e.serve(h, http.MethodPatch, "/v1/subscriptions/"+sub.ID, "application/merge-patch+json", body)
		after, err := e.store.Get(context.Background(), sub.ID)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Code == http.StatusOK {
			var got subscription.Subscription
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatalf("200 body %s: %v", rec.Body, err)
			}
			// Secret values show only in the answer that made them.
			if diff := cmp.Diff(after.Redacted(), got.Redacted()); diff != "" {
				t.Fatalf("200 body differs from stored (-stored +body):\n%s", diff)
			}
			if errs := after.Validate(); len(errs) > 0 {
				t.Fatalf("stored an invalid subscription: %v", errs)
			}
			return
		}
		checkProblem(t, rec, body)
		if diff := cmp.Diff(before, after); diff != "" {
			t.Fatalf("%d but the subscription changed (-before +after):\n%s", rec.Code, diff)
		}
	})
}

// FuzzSeekRequest defends the seek decoder: whatever the bytes, it
// returns a request that passes Validate, or a 400 problem; never both,
// never a panic.
func FuzzSeekRequest(f *testing.F) {
	for _, s := range []string{
		`{"to":"earliest"}`, `{"to":"latest"}`, `{"to":"timestamp","timestamp":"2030-01-02T03:04:05Z"}`,
		`{"to":"offsets","offsets":[{"topic":"orders","partition":0,"offset":5}]}`,
		`{"to":"offsets","offsets":[{"topic":"orders","partition":0,"offset":5},{"topic":"orders","partition":0,"offset":6}]}`,
		`{"to":"timestamp","timestamp":"2030-13-02T03:04:05Z"}`, `{"to":"offsets","offsets":[{"partition":1e10}]}`,
		`{"offsets":[{"x":1}]}`, `{"to":1}`, `{`, ``, `null`,
	} {
		f.Add([]byte(s))
	}
	sub := &subscription.Subscription{ID: "sub_x", Topics: []string{"orders", "refunds"}}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, p := decodeSeek(body, sub)
		if p != nil {
			if p.Status != http.StatusBadRequest || !strings.HasPrefix(p.Type, problemTypeBase) || req.To != "" {
				t.Fatalf("body %q: problem %+v with request %+v", body, p, req)
			}
			return
		}
		if errs := req.Validate(sub); len(errs) > 0 {
			t.Fatalf("body %q: accepted an invalid seek: %v", body, errs)
		}
	})
}
