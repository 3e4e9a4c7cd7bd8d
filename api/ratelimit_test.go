package api

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/nodes"
	"github.com/keyhook/keyhook/subscription"
)

// A rate limit is set at create, merged by PATCH, removed by null, and a
// wrong one is refused naming each field, changing nothing.
func TestRateLimitIsSetPatchedRemovedAndValidatedByField(t *testing.T) {
	e := newEnv(t)
	sub := e.create(t, `{"name":"n","topics":["orders"],"endpoint":{"url":"https://billing.example.com/h"},"rate_limit":{"per_second":50}}`)
	if want := (subscription.RateLimit{PerSecond: 50}); sub.RateLimit != want {
		t.Fatalf("created rate_limit = %+v, want %+v", sub.RateLimit, want)
	}
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
	r, got := patch(`{"rate_limit":{"burst":7}}`)
	if r.status != http.StatusOK || got.RateLimit != (subscription.RateLimit{PerSecond: 50, Burst: 7}) {
		t.Fatalf("PATCH burst = %d %s, want per_second kept and burst 7", r.status, r.body)
	}

	before := e.snapshot(t)
	for _, tt := range []struct {
		body   string
		fields []string
	}{
		{`{"rate_limit":{"per_second":0}}`, []string{"rate_limit.per_second"}},
		{`{"rate_limit":{"per_second":100001,"burst":-1}}`, []string{"rate_limit.per_second", "rate_limit.burst"}},
	} {
		r, _ := patch(tt.body)
		p := wantProblem(t, r, http.StatusBadRequest, slugValidation)
		if diff := cmp.Diff(tt.fields, fields(p)); diff != "" {
			t.Errorf("PATCH %s: fields (-want +got):\n%s", tt.body, diff)
		}
	}
	r, _ = patch(`{"rate_limit":{"per_second":"fast"}}`)
	if p := wantProblem(t, r, http.StatusBadRequest, slugInvalidJSON); !cmp.Equal([]string{"rate_limit.per_second"}, fields(p)) {
		t.Errorf("a string rate: fields %v, want rate_limit.per_second", fields(p))
	}
	e.unchanged(t, before)

	r, got = patch(`{"rate_limit":null}`)
	if r.status != http.StatusOK || got.RateLimit.Enabled() {
		t.Fatalf("PATCH null = %d %s, want the limit removed", r.status, r.body)
	}
	var raw map[string]any
	_ = json.Unmarshal(r.body, &raw)
	if _, ok := raw["rate_limit"]; ok {
		t.Errorf("a subscription without a limit shows rate_limit: %s", r.body)
	}
}

// A node's open breaker is listed by GET /v1/nodes, and by the status of
// the subscriptions whose endpoint is at that origin (however the URL
// spells it), not by the others'.
func TestOpenBreakersShowInNodesAndTheSubscriptionsStatus(t *testing.T) {
	e := newEnv(t)
	hit := e.create(t, `{"name":"n","topics":["orders"],"endpoint":{"url":"https://Billing.example.com:443/h"}}`)
	other := e.create(t, `{"name":"m","topics":["orders"],"endpoint":{"url":"https://other.example.com/h"}}`)
	since := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- e.nodes.RunReporting(ctx, nodes.Info{ID: "node-a", Version: "v1", Roles: []string{"dispatcher"}}, func(i *nodes.Info) {
			i.Breakers = []nodes.Breaker{{Origin: "https://billing.example.com:443", State: "open", Since: since, Waiting: 7}}
		})
	}()
	defer func() {
		cancel()
		<-done
	}()
	testutil.WaitFor(t, 5*time.Second, "the node listed with its breaker", func() bool {
		r := e.send(t, req{method: http.MethodGet, path: "/v1/nodes", token: e.reader})
		var l nodesResponse
		return r.status == http.StatusOK && json.Unmarshal(r.body, &l) == nil && len(l.Items) == 1 && len(l.Items[0].Breakers) == 1
	})
	status := func(id string) subscription.Status {
		r := e.send(t, req{method: http.MethodGet, path: "/v1/subscriptions/" + id + "/status", token: e.reader})
		var st subscription.Status
		if r.status != http.StatusOK || json.Unmarshal(r.body, &st) != nil {
			t.Fatalf("status = %d %s", r.status, r.body)
		}
		return st
	}
	want := []subscription.EndpointBreaker{{Node: "node-a", Origin: "https://billing.example.com:443", State: "open", Since: since, Waiting: 7}}
	if diff := cmp.Diff(want, status(hit.ID).Breakers); diff != "" {
		t.Errorf("status of the subscription behind the open breaker (-want +got):\n%s", diff)
	}
	if b := status(other.ID).Breakers; len(b) != 0 {
		t.Errorf("status of a subscription at another origin lists breakers %+v", b)
	}
}
