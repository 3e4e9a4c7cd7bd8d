package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keyhook/keyhook/subscription"
)

func TestSubscriptionRoundTrip(t *testing.T) {
	e := newEnv(t)

	r := e.do(t, http.MethodPost, "/v1/subscriptions", validBody)
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
	if got, want := r.header.Get("ETag"), `"`+created.ID+`.v1"`; got != want {
		t.Errorf("ETag = %q, want %q", got, want)
	}
	want := subscription.Subscription{
		ID: created.ID, Name: "orders to billing", Topics: []string{"orders"},
		Endpoint: subscription.Endpoint{URL: "https://billing.example.com/hook", TimeoutMS: 5000},
		Ordering: subscription.OrderPartition, Sharing: subscription.SharingAuto, MaxInFlight: 10, Start: subscription.StartLatest,
		DeadLetterTopic: "none", CreatedAt: created.CreatedAt, UpdatedAt: created.CreatedAt, Version: 1,
		Signing: created.Signing,
	}
	// A subscription signs by default: the creating answer shows its
	// first secret, the only answer that ever will.
	if n := len(created.Signing.Secrets); n != 1 || !strings.HasPrefix(created.Signing.Secrets[0].Secret, "whsec_") {
		t.Errorf("created with signing %+v, want one secret with its value", created.Signing)
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
	r = e.send(t, req{method: http.MethodPost, path: "/v1/subscriptions", token: e.writer,
		body: `{"name":"minimal","topics":["a"],"endpoint":{"url":"http://h.example"},"paused":true}`})
	if r.status != http.StatusCreated {
		t.Fatalf("minimal POST status = %d, want 201; body %s", r.status, r.body)
	}
	var minimal subscription.Subscription
	if err := json.Unmarshal(r.body, &minimal); err != nil {
		t.Fatal(err)
	}
	if minimal.Ordering != subscription.OrderKey || minimal.MaxInFlight != subscription.DefaultMaxInFlight ||
		minimal.Start != subscription.StartEarliest || !minimal.Paused {
		t.Errorf("minimal subscription not given defaults, or not paused as asked: %+v", minimal)
	}

	r = e.send(t, req{method: http.MethodGet, path: "/v1/subscriptions/" + created.ID, token: e.reader})
	var got subscription.Subscription
	if r.status != http.StatusOK || json.Unmarshal(r.body, &got) != nil {
		t.Fatalf("GET one: %d %s", r.status, r.body)
	}
	if diff := cmp.Diff(*created.Redacted(), got); diff != "" {
		t.Errorf("GET one (-want +got):\n%s", diff)
	}
	if got.Signing.Secrets[0].Secret != "" || got.Signing.Secrets[0].Hint == "" {
		t.Errorf("GET shows the secret, or no hint: %+v", got.Signing.Secrets[0])
	}
	if r.header.Get("ETag") != `"`+created.ID+`.v1"` {
		t.Errorf("GET ETag = %q", r.header.Get("ETag"))
	}

	r = e.do(t, http.MethodGet, "/v1/subscriptions", "")
	var list listResponse
	if r.status != http.StatusOK || json.Unmarshal(r.body, &list) != nil {
		t.Fatalf("GET list: %d %s", r.status, r.body)
	}
	all, _ := e.store.List(context.Background())
	for i, sub := range all {
		all[i] = sub.Redacted()
	}
	if diff := cmp.Diff(all, list.Items); diff != "" {
		t.Errorf("GET list (-stored +got):\n%s", diff)
	}
	if len(list.Items) != 2 || list.NextCursor != "" {
		t.Errorf("GET list has %d items and cursor %q, want 2 and none", len(list.Items), list.NextCursor)
	}

	r = e.do(t, http.MethodDelete, "/v1/subscriptions/"+created.ID, "")
	if r.status != http.StatusNoContent || len(r.body) != 0 {
		t.Errorf("DELETE = %d %q, want 204 and no body", r.status, r.body)
	}
	wantProblem(t, e.do(t, http.MethodGet, "/v1/subscriptions/"+created.ID, ""), http.StatusNotFound, slugNotFound)
	wantProblem(t, e.do(t, http.MethodDelete, "/v1/subscriptions/"+created.ID, ""), http.StatusNotFound, slugNotFound)
}

func TestEmptyListIsAnEmptyArray(t *testing.T) {
	e := newEnv(t)
	r := e.do(t, http.MethodGet, "/v1/subscriptions", "")
	if r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != `{"items":[]}` {
		t.Errorf("GET empty list = %d %s, want 200 {\"items\":[]}", r.status, r.body)
	}
}

func TestReplaceSetsEveryFieldAndBumpsTheVersion(t *testing.T) {
	e := newEnv(t)
	sub := e.create(t, validBody)

	r := e.do(t, http.MethodPut, "/v1/subscriptions/"+sub.ID, `{"name":"renamed","topics":["orders","refunds"],"endpoint":{"url":"https://other.example/h"}}`)
	if r.status != http.StatusOK {
		t.Fatalf("PUT = %d %s", r.status, r.body)
	}
	var got subscription.Subscription
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatal(err)
	}
	want := subscription.Subscription{
		ID: sub.ID, Name: "renamed", Topics: []string{"orders", "refunds"},
		Endpoint: subscription.Endpoint{URL: "https://other.example/h"},
		// PUT is a whole body: what it leaves out takes its default.
		Ordering: subscription.OrderKey, Sharing: subscription.SharingAuto, MaxInFlight: subscription.DefaultMaxInFlight, Start: subscription.StartEarliest,
		CreatedAt: sub.CreatedAt, UpdatedAt: got.UpdatedAt, Version: 2,
		// Signing, which the body leaves out, is kept, and not shown.
		Signing: sub.Redacted().Signing,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("PUT answer (-want +got):\n%s", diff)
	}
	if r.header.Get("ETag") != `"`+sub.ID+`.v2"` {
		t.Errorf("ETag = %q, want version 2", r.header.Get("ETag"))
	}
	stored, _ := e.store.Get(context.Background(), sub.ID)
	if diff := cmp.Diff(&got, stored.Redacted()); diff != "" {
		t.Errorf("stored differs from answer (-answer +stored):\n%s", diff)
	}

	// The same body again is no change: the version stays.
	r = e.do(t, http.MethodPut, "/v1/subscriptions/"+sub.ID, `{"name":"renamed","topics":["orders","refunds"],"endpoint":{"url":"https://other.example/h"}}`)
	if r.status != http.StatusOK || r.header.Get("ETag") != `"`+sub.ID+`.v2"` {
		t.Errorf("identical PUT = %d ETag %q, want 200 and version 2 kept", r.status, r.header.Get("ETag"))
	}

	wantProblem(t, e.do(t, http.MethodPut, "/v1/subscriptions/sub_unknown", validBody), http.StatusNotFound, slugNotFound)
	p := wantProblem(t, e.do(t, http.MethodPut, "/v1/subscriptions/"+sub.ID, `{"name":"n","topics":["t"],"endpoint":{"url":"https://x.blocked.test/"}}`),
		http.StatusBadRequest, slugForbiddenEndpoint)
	if diff := cmp.Diff([]string{"endpoint.url"}, fields(p)); diff != "" {
		t.Errorf("fields (-want +got):\n%s", diff)
	}
}

func TestPatchMergesAndNullResetsToDefault(t *testing.T) {
	e := newEnv(t)
	sub := e.create(t, validBody)
	patch := func(body string) (response, subscription.Subscription) {
		t.Helper()
		r := e.send(t, req{method: http.MethodPatch, path: "/v1/subscriptions/" + sub.ID, token: e.admin,
			header: map[string]string{"Content-Type": "application/merge-patch+json"}, body: body})
		var got subscription.Subscription
		if r.status == http.StatusOK {
			if err := json.Unmarshal(r.body, &got); err != nil {
				t.Fatal(err)
			}
		}
		return r, got
	}

	r, got := patch(`{"endpoint":{"timeout_ms":9000},"max_in_flight":3,"ordering":null,"Name":"new name"}`)
	if r.status != http.StatusOK {
		t.Fatalf("PATCH = %d %s", r.status, r.body)
	}
	want := *sub.Redacted()
	want.Endpoint.TimeoutMS = 9000        // nested key merged, url kept
	want.MaxInFlight = 3                  // replaced
	want.Ordering = subscription.OrderKey // null: back to the default
	want.Name = "new name"                // matched case-insensitively
	want.UpdatedAt, want.Version = got.UpdatedAt, 2
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("PATCH (-want +got):\n%s", diff)
	}

	r, got = patch(`{}`)
	if r.status != http.StatusOK || got.Version != 2 {
		t.Errorf("empty PATCH = %d version %d, want 200 and no new version", r.status, got.Version)
	}

	before := e.snapshot(t)
	for _, tt := range []struct {
		body, slug string
		fields     []string
	}{
		{`{"topics":null}`, slugValidation, []string{"topics"}},
		{`{"version":9,"max_in_flight":0.5}`, slugInvalidJSON, []string{"max_in_flight"}},
		{`{"version":9}`, slugValidation, []string{"version"}},
		{`{"endpoint":{"secret":"x"}}`, slugUnknownField, []string{"endpoint.secret"}},
		{`{"endpoint":"https://x.example"}`, slugInvalidJSON, []string{"endpoint"}},
		{`[]`, slugInvalidJSON, nil},
		{`{"name":"a"} {}`, slugInvalidJSON, nil},
		{`{"endpoint":{"url":"https://x.blocked.test/"}}`, slugForbiddenEndpoint, []string{"endpoint.url"}},
	} {
		r, _ := patch(tt.body)
		p := wantProblem(t, r, http.StatusBadRequest, tt.slug)
		if diff := cmp.Diff(tt.fields, fields(p)); diff != "" {
			t.Errorf("PATCH %s: fields (-want +got):\n%s", tt.body, diff)
		}
	}
	e.unchanged(t, before)

	r = e.send(t, req{method: http.MethodPatch, path: "/v1/subscriptions/" + sub.ID, token: e.writer,
		header: map[string]string{"Content-Type": "application/json-patch+json"}, body: `[]`})
	wantProblem(t, r, http.StatusUnsupportedMediaType, slugUnsupportedMediaType)
	if r.header.Get("Accept-Patch") != "application/merge-patch+json" {
		t.Errorf("Accept-Patch = %q", r.header.Get("Accept-Patch"))
	}
	e.unchanged(t, before)
}

func TestPauseAndResumeFlipPausedOnce(t *testing.T) {
	e := newEnv(t)
	sub := e.create(t, validBody)
	for _, step := range []struct {
		path    string
		paused  bool
		version int64
	}{
		{"/pause", true, 2},
		{"/pause", true, 2}, // already paused: no change, no new version
		{"/resume", false, 3},
		{"/resume", false, 3},
	} {
		r := e.do(t, http.MethodPost, "/v1/subscriptions/"+sub.ID+step.path, "")
		var got subscription.Subscription
		if r.status != http.StatusOK || json.Unmarshal(r.body, &got) != nil {
			t.Fatalf("POST %s = %d %s", step.path, r.status, r.body)
		}
		if got.Paused != step.paused || got.Version != step.version {
			t.Errorf("after %s: paused %v version %d, want %v and %d", step.path, got.Paused, got.Version, step.paused, step.version)
		}
	}
	wantProblem(t, e.do(t, http.MethodPost, "/v1/subscriptions/sub_nope/pause", ""), http.StatusNotFound, slugNotFound)
}

func TestInternalErrorsAreLoggedButNotShown(t *testing.T) {
	e := newEnv(t)
	sub := e.create(t, validBody)

	e.status.set(nil, errors.New("tracking: load 10.1.2.3:6379 secret-detail"))
	r := e.do(t, http.MethodGet, "/v1/subscriptions/"+sub.ID+"/status", "")
	wantProblem(t, r, http.StatusInternalServerError, slugInternal)
	if bytes.Contains(r.body, []byte("secret-detail")) {
		t.Errorf("500 body leaks the cause: %s", r.body)
	}
	if !strings.Contains(e.log.String(), "secret-detail") {
		t.Errorf("cause not logged; log: %s", e.log.String())
	}

	// A store that cannot reach Redis fails every route the same way.
	b := newEnvWith(t, envOptions{brokenStore: true})
	for _, path := range []string{"/v1/subscriptions", "/v1/subscriptions/" + sub.ID, "/v1/nodes"} {
		r := b.do(t, http.MethodGet, path, "")
		wantProblem(t, r, http.StatusInternalServerError, slugInternal)
		if bytes.Contains(r.body, []byte("127.0.0.1")) {
			t.Errorf("GET %s: 500 body leaks the cause: %s", path, r.body)
		}
	}
}

func TestUnknownRoutesAndMethodsAreProblems(t *testing.T) {
	e := newEnv(t)
	wantProblem(t, e.do(t, http.MethodGet, "/nope", ""), http.StatusNotFound, slugNotFound)
	wantProblem(t, e.do(t, http.MethodGet, "/v1/subscriptions/a/b/c", ""), http.StatusNotFound, slugNotFound)

	tests := []struct {
		method, path, allow string
	}{
		{http.MethodPut, "/v1/subscriptions", "GET, POST"},
		{http.MethodPost, "/v1/subscriptions/sub_x", "GET, PUT, PATCH, DELETE"},
		{http.MethodGet, "/v1/subscriptions/sub_x/pause", "POST"},
		{http.MethodPost, "/healthz", "GET"},
	}
	for _, tt := range tests {
		r := e.do(t, tt.method, tt.path, "")
		wantProblem(t, r, http.StatusMethodNotAllowed, slugMethodNotAllowed)
		if got := r.header.Get("Allow"); got != tt.allow {
			t.Errorf("%s %s: Allow = %q, want %q", tt.method, tt.path, got, tt.allow)
		}
	}
}

func TestStatusPassesThroughTheStatusSourceAndAddsAges(t *testing.T) {
	now := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	e := newEnvWith(t, envOptions{config: func(c *Config) { c.Now = func() time.Time { return now } }})
	sub := e.create(t, validBody)
	oldest := now.Add(-1500 * time.Millisecond)
	source := &subscription.Status{
		SubscriptionID: sub.ID,
		Partitions: []subscription.PartitionStatus{{
			Topic: "orders", Partition: 3, Committed: 10, LogEnd: 25, Lag: 15, Watermark: 10,
			Pending: 4, InFlight: 2, InFlightKeys: 2, AckedRanges: [][2]int64{{12, 13}, {20, 20}}, Owner: "node-a",
			OldestPending: &oldest, Updated: &now,
		}},
	}
	e.status.set(source, nil)

	r := e.send(t, req{method: http.MethodGet, path: "/v1/subscriptions/" + sub.ID + "/status", token: e.reader})
	var got subscription.Status
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" || json.Unmarshal(r.body, &got) != nil {
		t.Fatalf("GET status = %d %q %s", r.status, r.header.Get("Content-Type"), r.body)
	}
	want := *source
	want.Partitions = []subscription.PartitionStatus{source.Partitions[0]}
	age := int64(1500)
	want.Partitions[0].OldestPendingAgeMS = &age
	if diff := cmp.Diff(&want, &got); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{sub.ID}, e.status.askedIDs()); diff != "" {
		t.Errorf("status source asked about (-want +got):\n%s", diff)
	}

	wantProblem(t, e.do(t, http.MethodGet, "/v1/subscriptions/sub_unknown/status", ""), http.StatusNotFound, slugNotFound)
	if n := len(e.status.askedIDs()); n != 1 {
		t.Errorf("status source asked %d times, want 1 (not for an unknown subscription)", n)
	}
}

func TestHealthzAndReadyz(t *testing.T) {
	e := newEnv(t)
	r := e.send(t, req{method: http.MethodGet, path: "/healthz"})
	if r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != `{"status":"ok"}` {
		t.Errorf("GET /healthz = %d %s", r.status, r.body)
	}
	r = e.send(t, req{method: http.MethodGet, path: "/readyz"})
	if r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != `{"status":"ready","checks":{"kafka":"ok","redis":"ok"}}` {
		t.Errorf("GET /readyz = %d %s", r.status, r.body)
	}

	e.setReady("kafka", errors.New("dial 10.0.0.9:9092: connection refused"))
	r = e.send(t, req{method: http.MethodGet, path: "/readyz"})
	p := wantProblem(t, r, http.StatusServiceUnavailable, slugNotReady)
	if diff := cmp.Diff([]string{"kafka"}, fields(p)); diff != "" {
		t.Errorf("failing checks (-want +got):\n%s", diff)
	}
	if bytes.Contains(r.body, []byte("10.0.0.9")) {
		t.Errorf("/readyz shows the cause to unauthenticated callers: %s", r.body)
	}
	// Health is about the process, not its backends.
	if r := e.send(t, req{method: http.MethodGet, path: "/healthz"}); r.status != http.StatusOK {
		t.Errorf("GET /healthz while not ready = %d, want 200", r.status)
	}
	e.setReady("kafka", nil)
	_ = e.rdb.Close() // a client that no longer answers, as when Redis is down
	p = wantProblem(t, e.send(t, req{method: http.MethodGet, path: "/readyz"}), http.StatusServiceUnavailable, slugNotReady)
	if diff := cmp.Diff([]string{"redis"}, fields(p)); diff != "" {
		t.Errorf("failing checks (-want +got):\n%s", diff)
	}
}

func TestMetricsAreMountedWithOptionalAuth(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte("keyhook_up 1\n"))
	})
	open := newEnvWith(t, envOptions{config: func(c *Config) { c.Metrics, c.MetricsPublic = metrics, true }})
	if r := open.send(t, req{method: http.MethodGet, path: "/metrics"}); r.status != http.StatusOK || string(r.body) != "keyhook_up 1\n" {
		t.Errorf("GET /metrics without auth = %d %s", r.status, r.body)
	}
	closed := newEnvWith(t, envOptions{config: func(c *Config) { c.Metrics = metrics }})
	wantProblem(t, closed.send(t, req{method: http.MethodGet, path: "/metrics"}), http.StatusUnauthorized, slugUnauthorized)
	if r := closed.send(t, req{method: http.MethodGet, path: "/metrics", token: closed.admin}); r.status != http.StatusOK {
		t.Errorf("GET /metrics with a token = %d %s", r.status, r.body)
	}
	none := newEnv(t)
	wantProblem(t, none.send(t, req{method: http.MethodGet, path: "/metrics"}), http.StatusNotFound, slugNotFound)
}

func TestNewRouterNamesMissingDependencies(t *testing.T) {
	_, err := NewRouter(Dependencies{Store: new(subscription.Store)}, Config{})
	if err == nil || !strings.Contains(err.Error(), "Dependencies.URLs") || !strings.Contains(err.Error(), "Dependencies.Auth") {
		t.Errorf("NewRouter with missing dependencies: err = %v, want one naming each", err)
	}
}

// Kafka not answering yet (no group coordinator on a fresh cluster, a
// broker restarting) is no server error: the operator actions answer 503
// kafka-unavailable, with Retry-After, and hide the cause.
func TestKafkaUnavailableAnswers503NotReady(t *testing.T) {
	e := newEnv(t)
	sub := e.create(t, validBody)
	e.status.set(nil, fmt.Errorf("%w: COORDINATOR_NOT_AVAILABLE at 10.1.2.3:9092", subscription.ErrUnavailable))
	r := e.do(t, http.MethodGet, "/v1/subscriptions/"+sub.ID+"/status", "")
	wantProblem(t, r, http.StatusServiceUnavailable, slugKafkaUnavailable)
	if r.header.Get("Retry-After") == "" {
		t.Error("no Retry-After on a 503")
	}
	if bytes.Contains(r.body, []byte("10.1.2.3")) {
		t.Errorf("503 body leaks the cause: %s", r.body)
	}
}
