package api

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

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
