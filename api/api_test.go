package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
	"github.com/redis/go-redis/v9"
)

// refusingChecker refuses every URL whose host ends in ".blocked.test",
// the way an address policy refuses a private address.
type refusingChecker struct{}

func (refusingChecker) CheckURL(_ context.Context, raw string) error {
	if strings.Contains(raw, ".blocked.test") {
		return errors.New("host resolves to a private address")
	}
	return nil
}

// fakeStatus answers Status with a fixed result and remembers what it was
// asked about.
type fakeStatus struct {
	mu     sync.Mutex
	status *subscription.Status
	err    error
	asked  []string
}

func (f *fakeStatus) Status(_ context.Context, s *subscription.Subscription) (*subscription.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, s.ID)
	return f.status, f.err
}

func (f *fakeStatus) askedIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.asked...)
}

// lockedBuffer collects log output written from server goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type env struct {
	url    string
	rdb    *redis.Client
	store  *subscription.Store
	status *fakeStatus
	log    *lockedBuffer
}

func newEnv(t *testing.T) *env {
	t.Helper()
	rdb := testutil.StartRedis(t).Client()
	e := &env{rdb: rdb, store: subscription.NewStore(rdb, ""), status: &fakeStatus{}, log: &lockedBuffer{}}
	srv := httptest.NewServer(NewRouter(e.store, refusingChecker{}, e.status,
		Config{Logger: slog.New(slog.NewTextHandler(e.log, nil))}))
	t.Cleanup(srv.Close)
	e.url = srv.URL
	return e
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (e *env) do(t *testing.T, method, path, contentType string, body []byte) response {
	t.Helper()
	req, err := http.NewRequest(method, e.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

func (e *env) list(t *testing.T) []*subscription.Subscription {
	t.Helper()
	subs, err := e.store.List(context.Background())
	if err != nil {
		t.Fatalf("store.List: %v", err)
	}
	return subs
}

// wantProblem checks that r is a problem+json of the given status and slug
// and returns it.
func wantProblem(t *testing.T, r response, status int, slug string) problem {
	t.Helper()
	if r.status != status {
		t.Errorf("status = %d, want %d; body %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type = %q, want application/problem+json", ct)
	}
	var p problem
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem body %s: %v", r.body, err)
	}
	if p.Type != problemTypeBase+slug || p.Status != status || p.Title == "" {
		t.Errorf("problem = %+v, want type %s, status %d and a title", p, problemTypeBase+slug, status)
	}
	return p
}

func fields(p problem) []string {
	var fs []string
	for _, fe := range p.Errors {
		fs = append(fs, fe.Field)
	}
	return fs
}

const validBody = `{"name":"orders to billing","topics":["orders"],"endpoint":{"url":"https://billing.example.com/hook","timeout_ms":5000},"ordering":"partition","max_in_flight":10,"start":"latest","dead_letter_topic":"none"}`

func TestSubscriptionRoundTrip(t *testing.T) {
	e := newEnv(t)

	r := e.do(t, http.MethodPost, "/v1/subscriptions", "application/json", []byte(validBody))
	if r.status != http.StatusCreated {
		t.Fatalf("POST status = %d, want 201; body %s", r.status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("POST Content-Type = %q, want application/json", ct)
	}
	var created subscription.Subscription
	if err := json.Unmarshal(r.body, &created); err != nil {
		t.Fatalf("POST body: %v", err)
	}
	if got, want := r.header.Get("Location"), "/v1/subscriptions/"+created.ID; got != want {
		t.Errorf("Location = %q, want %q", got, want)
	}
	want := subscription.Subscription{
		ID: created.ID, Name: "orders to billing", Topics: []string{"orders"},
		Endpoint: subscription.Endpoint{URL: "https://billing.example.com/hook", TimeoutMS: 5000},
		Ordering: subscription.OrderPartition, MaxInFlight: 10, Start: subscription.StartLatest,
		DeadLetterTopic: "none", CreatedAt: created.CreatedAt, UpdatedAt: created.CreatedAt, Version: 1,
	}
	if diff := cmp.Diff(want, created); diff != "" {
		t.Errorf("POST body (-want +got):\n%s", diff)
	}
	stored, err := e.store.Get(context.Background(), created.ID)
	if err != nil {
		t.Fatalf("store.Get: %v", err)
	}
	if diff := cmp.Diff(stored, &created); diff != "" {
		t.Errorf("POST body differs from stored (-stored +body):\n%s", diff)
	}

	// Defaults apply to what the client leaves out; no Content-Type is fine.
	r = e.do(t, http.MethodPost, "/v1/subscriptions", "", []byte(`{"name":"minimal","topics":["a"],"endpoint":{"url":"http://h.example"}}`))
	if r.status != http.StatusCreated {
		t.Fatalf("minimal POST status = %d, want 201; body %s", r.status, r.body)
	}
	var minimal subscription.Subscription
	if err := json.Unmarshal(r.body, &minimal); err != nil {
		t.Fatal(err)
	}
	if minimal.Ordering != subscription.OrderKey || minimal.MaxInFlight != subscription.DefaultMaxInFlight || minimal.Start != subscription.StartEarliest {
		t.Errorf("minimal subscription not given defaults: %+v", minimal)
	}

	r = e.do(t, http.MethodGet, "/v1/subscriptions/"+created.ID, "", nil)
	var got subscription.Subscription
	if r.status != http.StatusOK || json.Unmarshal(r.body, &got) != nil {
		t.Fatalf("GET one: %d %s", r.status, r.body)
	}
	if diff := cmp.Diff(created, got); diff != "" {
		t.Errorf("GET one (-want +got):\n%s", diff)
	}

	r = e.do(t, http.MethodGet, "/v1/subscriptions", "", nil)
	var list listResponse
	if r.status != http.StatusOK || json.Unmarshal(r.body, &list) != nil {
		t.Fatalf("GET list: %d %s", r.status, r.body)
	}
	if diff := cmp.Diff(e.list(t), list.Items); diff != "" {
		t.Errorf("GET list (-stored +got):\n%s", diff)
	}
	if len(list.Items) != 2 {
		t.Errorf("GET list has %d items, want 2", len(list.Items))
	}

	r = e.do(t, http.MethodDelete, "/v1/subscriptions/"+created.ID, "", nil)
	if r.status != http.StatusNoContent || len(r.body) != 0 {
		t.Errorf("DELETE = %d %q, want 204 and no body", r.status, r.body)
	}
	wantProblem(t, e.do(t, http.MethodGet, "/v1/subscriptions/"+created.ID, "", nil), http.StatusNotFound, slugNotFound)
	wantProblem(t, e.do(t, http.MethodDelete, "/v1/subscriptions/"+created.ID, "", nil), http.StatusNotFound, slugNotFound)
}

func TestEmptyListIsAnEmptyArray(t *testing.T) {
	e := newEnv(t)
	r := e.do(t, http.MethodGet, "/v1/subscriptions", "", nil)
	if r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != `{"items":[]}` {
		t.Errorf("GET empty list = %d %s, want 200 {\"items\":[]}", r.status, r.body)
	}
}

func TestBadCreateRequestsGetProblemsAndChangeNothing(t *testing.T) {
	e := newEnv(t)
	// One stored subscription, so "unchanged" is more than "still empty".
	seed := e.do(t, http.MethodPost, "/v1/subscriptions", "application/json", []byte(validBody))
	if seed.status != http.StatusCreated {
		t.Fatalf("seed POST = %d %s", seed.status, seed.body)
	}
	withField := func(extra string) string { return strings.TrimSuffix(validBody, "}") + "," + extra + "}" }

	tests := []struct {
		name        string
		contentType string
		body        string
		status      int
		slug        string
		fields      []string
	}{
		{name: "empty body", body: "", status: 400, slug: slugInvalidJSON},
		{name: "truncated JSON", body: `{"name":"x","topics":[`, status: 400, slug: slugInvalidJSON},
		{name: "malformed JSON", body: `{"name" "x"}`, status: 400, slug: slugInvalidJSON},
		{name: "not an object", body: `["orders"]`, status: 400, slug: slugInvalidJSON},
		{name: "null body", body: `null`, status: 400, slug: slugInvalidJSON},
		{name: "trailing data", body: validBody + ` {}`, status: 400, slug: slugInvalidJSON},
		{name: "wrong type", body: withField(`"max_in_flight":"x"`), status: 400, slug: slugInvalidJSON, fields: []string{"max_in_flight"}},
		{name: "wrong nested type", body: `{"endpoint":{"timeout_ms":"5s"}}`, status: 400, slug: slugInvalidJSON, fields: []string{"endpoint.timeout_ms"}},
		{name: "wrong element type", body: `{"topics":["a",1]}`, status: 400, slug: slugInvalidJSON, fields: []string{"topics"}},
		{name: "number out of range", body: `{"max_in_flight":1e40}`, status: 400, slug: slugInvalidJSON, fields: []string{"max_in_flight"}},
		{name: "unknown field", body: withField(`"colour":"red"`), status: 400, slug: slugUnknownField, fields: []string{"colour"}},
		{name: "unknown fields named by path", body: `{"extra":1,"endpoint":{"url":"https://h.example","secret":"s"}}`, status: 400, slug: slugUnknownField, fields: []string{"extra", "endpoint.secret"}},
		{name: "read-only fields", body: withField(`"id":"sub_mine","created_at":"2020-01-01T00:00:00Z","version":7`), status: 400, slug: slugValidation, fields: []string{"id", "created_at", "version"}},
		{name: "read-only even when null", body: withField(`"updated_at":null`), status: 400, slug: slugValidation, fields: []string{"updated_at"}},
		{name: "unknown ordering", body: `{"name":"n","topics":["t"],"endpoint":{"url":"https://h.example"},"ordering":"random"}`, status: 400, slug: slugValidation, fields: []string{"ordering"}},
		{name: "empty topics", body: `{"name":"n","topics":[],"endpoint":{"url":"https://h.example"}}`, status: 400, slug: slugValidation, fields: []string{"topics"}},
		{name: "every validation problem at once", body: `{"topics":["ok","ok"],"endpoint":{"url":"ftp://x"},"start":"now"}`, status: 400, slug: slugValidation, fields: []string{"name", "topics[1]", "endpoint.url", "start"}},
		{name: "forbidden URL", body: `{"name":"n","topics":["t"],"endpoint":{"url":"https://internal.blocked.test/hook"}}`, status: 400, slug: slugForbiddenEndpoint, fields: []string{"endpoint.url"}},
		{name: "oversized body", body: `{"name":"` + strings.Repeat("x", DefaultMaxBodyBytes) + `"}`, status: 413, slug: slugBodyTooLarge},
		{name: "wrong content type", contentType: "text/plain", body: validBody, status: 415, slug: slugUnsupportedMediaType},
		{name: "JSON in a charset other than UTF-8", contentType: "application/json; charset=latin1", body: validBody, status: 415, slug: slugUnsupportedMediaType},
		{name: "unparsable content type", contentType: "application/json;;", body: validBody, status: 415, slug: slugUnsupportedMediaType},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := e.list(t)
			ct := tt.contentType
			if ct == "" {
				ct = "application/json"
			}
			r := e.do(t, http.MethodPost, "/v1/subscriptions", ct, []byte(tt.body))
			p := wantProblem(t, r, tt.status, tt.slug)
			if diff := cmp.Diff(tt.fields, fields(p)); diff != "" {
				t.Errorf("errors[].field (-want +got):\n%s\nproblem: %s", diff, r.body)
			}
			for _, fe := range p.Errors {
				if fe.Message == "" {
					t.Errorf("field error %q has no message", fe.Field)
				}
			}
			if diff := cmp.Diff(before, e.list(t)); diff != "" {
				t.Errorf("store changed (-before +after):\n%s", diff)
			}
		})
	}
}

func TestUnknownRoutesAndMethodsAreProblems(t *testing.T) {
	e := newEnv(t)
	wantProblem(t, e.do(t, http.MethodGet, "/nope", "", nil), http.StatusNotFound, slugNotFound)
	wantProblem(t, e.do(t, http.MethodGet, "/v1/subscriptions/a/b/c", "", nil), http.StatusNotFound, slugNotFound)

	tests := []struct {
		method, path, allow string
	}{
		{http.MethodPut, "/v1/subscriptions", "GET, POST"},
		{http.MethodPatch, "/v1/subscriptions/sub_x", "GET, DELETE"},
		{http.MethodPost, "/healthz", "GET"},
	}
	for _, tt := range tests {
		r := e.do(t, tt.method, tt.path, "", nil)
		wantProblem(t, r, http.StatusMethodNotAllowed, slugMethodNotAllowed)
		if got := r.header.Get("Allow"); got != tt.allow {
			t.Errorf("%s %s: Allow = %q, want %q", tt.method, tt.path, got, tt.allow)
		}
	}
}

func TestStatusPassesThroughTheStatusSource(t *testing.T) {
	e := newEnv(t)
	r := e.do(t, http.MethodPost, "/v1/subscriptions", "application/json", []byte(validBody))
	var sub subscription.Subscription
	if r.status != http.StatusCreated || json.Unmarshal(r.body, &sub) != nil {
		t.Fatalf("POST = %d %s", r.status, r.body)
	}
	updated := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	e.status.status = &subscription.Status{
		SubscriptionID: sub.ID,
		Partitions: []subscription.PartitionStatus{{
			Topic: "orders", Partition: 3, Committed: 10, LogEnd: 25, Lag: 15, Watermark: 10,
			Pending: 4, InFlight: 2, AckedRanges: [][2]int64{{12, 13}, {20, 20}}, Owner: "node-a", Updated: &updated,
		}},
	}

	r = e.do(t, http.MethodGet, "/v1/subscriptions/"+sub.ID+"/status", "", nil)
	var got subscription.Status
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" || json.Unmarshal(r.body, &got) != nil {
		t.Fatalf("GET status = %d %q %s", r.status, r.header.Get("Content-Type"), r.body)
	}
	if diff := cmp.Diff(e.status.status, &got); diff != "" {
		t.Errorf("status (-source +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{sub.ID}, e.status.askedIDs()); diff != "" {
		t.Errorf("status source asked about (-want +got):\n%s", diff)
	}

	wantProblem(t, e.do(t, http.MethodGet, "/v1/subscriptions/sub_unknown/status", "", nil), http.StatusNotFound, slugNotFound)
	if n := len(e.status.askedIDs()); n != 1 {
		t.Errorf("status source asked %d times, want 1 (not for an unknown subscription)", n)
	}
}

func TestInternalErrorsAreLoggedButNotShown(t *testing.T) {
	e := newEnv(t)
	r := e.do(t, http.MethodPost, "/v1/subscriptions", "application/json", []byte(validBody))
	var sub subscription.Subscription
	if r.status != http.StatusCreated || json.Unmarshal(r.body, &sub) != nil {
		t.Fatalf("POST = %d %s", r.status, r.body)
	}

	e.status.err = errors.New("tracking: load 10.1.2.3:6379 secret-detail")
	r = e.do(t, http.MethodGet, "/v1/subscriptions/"+sub.ID+"/status", "", nil)
	wantProblem(t, r, http.StatusInternalServerError, slugInternal)
	if bytes.Contains(r.body, []byte("secret-detail")) {
		t.Errorf("500 body leaks the cause: %s", r.body)
	}
	if !strings.Contains(e.log.String(), "secret-detail") {
		t.Errorf("cause not logged; log: %s", e.log.String())
	}

	// A store that cannot reach Redis fails every route the same way.
	_ = e.rdb.Close()
	for _, path := range []string{"/v1/subscriptions", "/v1/subscriptions/" + sub.ID} {
		r := e.do(t, http.MethodGet, path, "", nil)
		wantProblem(t, r, http.StatusInternalServerError, slugInternal)
		if bytes.Contains(r.body, []byte("redis")) {
			t.Errorf("GET %s: 500 body leaks the cause: %s", path, r.body)
		}
	}
}

func TestHealthz(t *testing.T) {
	e := newEnv(t)
	r := e.do(t, http.MethodGet, "/healthz", "", nil)
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" || strings.TrimSpace(string(r.body)) != `{"status":"ok"}` {
		t.Errorf("GET /healthz = %d %q %s", r.status, r.header.Get("Content-Type"), r.body)
	}
}

// FuzzCreateRequest defends the request decoder's contract: whatever the
// bytes, the answer is 201 with the stored subscription, or a 4xx problem
// that stored nothing; never a panic, a 5xx, or another shape.
func FuzzCreateRequest(f *testing.F) {
	for _, s := range []string{
		validBody,
		`{"name":"n","topics":["t"],"endpoint":{"url":"http://h.example"}}`,
		`{"name":"n","topics":["t"],"endpoint":{"url":"http://x.blocked.test"}}`,
		`{"NAME":"n","Topics":["t"],"endpoint":{"URL":"http://h.example"}}`,
		`{"endpoint":{"x":{"y":[1,{"z":2}]}}}`,
		`{"id":null}`, `{"max_in_flight":-1}`, `{"topics":[1]}`, `{"a":1} x`, `{`, `[]`, ``, `"\ud800"`,
	} {
		f.Add([]byte(s))
	}
	rdb := testutil.StartRedis(f).Client()
	store := subscription.NewStore(rdb, "")
	h := NewRouter(store, refusingChecker{}, &fakeStatus{}, Config{MaxBodyBytes: 4096, Logger: slog.New(slog.DiscardHandler)})
	f.Fuzz(func(t *testing.T, body []byte) {
		before, err := rdb.HLen(context.Background(), "keyhook:subscriptions").Result()
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodPost, "/v1/subscriptions", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)

		after, err := rdb.HLen(context.Background(), "keyhook:subscriptions").Result()
		if err != nil {
			t.Fatal(err)
		}
		switch code := rec.Code; {
		case code == http.StatusCreated:
			var sub subscription.Subscription
			if err := json.Unmarshal(rec.Body.Bytes(), &sub); err != nil || sub.ID == "" {
				t.Fatalf("201 body %s: %v", rec.Body, err)
			}
			if after != before+1 {
				t.Fatalf("201 but store went from %d to %d", before, after)
			}
		case code >= 400 && code < 500:
			var p problem
			if rec.Header().Get("Content-Type") != "application/problem+json" ||
				json.Unmarshal(rec.Body.Bytes(), &p) != nil || p.Status != code || !strings.HasPrefix(p.Type, problemTypeBase) {
				t.Fatalf("%d answer is not a problem: %q %s", code, rec.Header().Get("Content-Type"), rec.Body)
			}
			if after != before {
				t.Fatalf("%d but store went from %d to %d", code, before, after)
			}
		default:
			t.Fatalf("status %d for body %q: %s", code, body, rec.Body)
		}
	})
}
