package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keyhook/keyhook/auth"
	"github.com/keyhook/keyhook/subscription"
)

// subBody is a valid create body reading topics and dead-lettering into
// dlt ("" for the default).
func subBody(name string, topics []string, dlt string) string {
	b, _ := json.Marshal(map[string]any{
		"name": name, "topics": topics, "endpoint": map[string]any{"url": "https://h.example/" + name},
		"dead_letter_topic": dlt,
	})
	return string(b)
}

// TestDeadLetterTopicsCannotLoopOrWriteIntoOtherTopics defends the rule
// that no topic is both read by a subscription and written by another's
// dead-lettering, and that Kafka's internal topics are never written: on
// create, PUT and PATCH, each refusal naming its field and changing
// nothing.
func TestDeadLetterTopicsCannotLoopOrWriteIntoOtherTopics(t *testing.T) {
	e := newEnv(t)
	orders := e.create(t, subBody("orders", []string{"orders"}, "orders.failed"))
	payments := e.create(t, subBody("payments", []string{"payments"}, ""))
	patch := map[string]string{"Content-Type": "application/merge-patch+json"}
	put := func(sub *subscription.Subscription, change func(m map[string]any)) string {
		m := map[string]any{"name": sub.Name, "topics": sub.Topics, "endpoint": map[string]any{"url": sub.Endpoint.URL},
			"dead_letter_topic": sub.DeadLetterTopic}
		change(m)
		b, _ := json.Marshal(m)
		return string(b)
	}

	tests := []struct {
		name         string
		method, path string
		body         string
		fields       string // comma-separated
	}{
		{"create: Kafka's offsets topic", "POST", "/v1/subscriptions", subBody("x", []string{"x"}, "__consumer_offsets"), "dead_letter_topic"},
		{"create: Kafka's transaction topic", "POST", "/v1/subscriptions", subBody("x", []string{"x"}, "__transaction_state"), "dead_letter_topic"},
		{"create: any internal topic", "POST", "/v1/subscriptions", subBody("x", []string{"x"}, "__anything"), "dead_letter_topic"},
		{"create: reading an internal topic", "POST", "/v1/subscriptions", subBody("x", []string{"__consumer_offsets"}, "none"), "topics[0]"},
		{"create: into a topic another subscription reads", "POST", "/v1/subscriptions", subBody("x", []string{"x"}, "payments"), "dead_letter_topic"},
		{"create: reading a topic another subscription dead-letters into", "POST", "/v1/subscriptions", subBody("x", []string{"x", "orders.failed"}, "none"), "topics[1]"},
		{"create: the loop back into orders", "POST", "/v1/subscriptions", subBody("x", []string{"orders.failed"}, "orders"), "topics[0],dead_letter_topic"},
		{"put: into a topic another subscription reads", "PUT", "/v1/subscriptions/" + orders.ID, put(orders, func(m map[string]any) { m["dead_letter_topic"] = "payments" }), "dead_letter_topic"},
		{"put: reading a topic another subscription dead-letters into", "PUT", "/v1/subscriptions/" + payments.ID, put(payments, func(m map[string]any) { m["topics"] = []string{"orders.failed"} }), "topics[0]"},
		{"patch: into a topic another subscription reads", "PATCH", "/v1/subscriptions/" + orders.ID, `{"dead_letter_topic":"payments"}`, "dead_letter_topic"},
		{"patch: into an internal topic", "PATCH", "/v1/subscriptions/" + orders.ID, `{"dead_letter_topic":"__consumer_offsets"}`, "dead_letter_topic"},
		{"patch: reading a topic another subscription dead-letters into", "PATCH", "/v1/subscriptions/" + payments.ID, `{"topics":["payments","orders.failed"]}`, "topics[1]"},
	}
	before := e.snapshot(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := map[string]string{"Content-Type": "application/json"}
			if tt.method == "PATCH" {
				h = patch
			}
			r := e.send(t, req{method: tt.method, path: tt.path, token: e.admin, header: h, body: tt.body})
			p := wantProblem(t, r, http.StatusBadRequest, slugValidation)
			if diff := cmp.Diff(strings.Split(tt.fields, ","), fields(p)); diff != "" {
				t.Errorf("errors[].field (-want +got):\n%s\nproblem: %s", diff, r.body)
			}
			e.unchanged(t, before)
		})
	}

	// What stays allowed: a dead-letter topic nobody reads, kept on an
	// unrelated change, and the default "<topic>.keyhook.dlq".
	e.create(t, subBody("refunds", []string{"refunds"}, "refunds.failed"))
	r := e.send(t, req{method: "PATCH", path: "/v1/subscriptions/" + orders.ID, token: e.admin, header: patch, body: `{"name":"orders, renamed"}`})
	if r.status != http.StatusOK {
		t.Errorf("unrelated PATCH = %d %s, want 200", r.status, r.body)
	}
}

// TestCredentialsDoNotFollowAnOriginChange defends endpoint credentials
// against a write that only moves the URL: a new origin (scheme, host,
// port) needs the credentials sent again, dropped, or explicitly kept.
func TestCredentialsDoNotFollowAnOriginChange(t *testing.T) {
	e := newEnv(t)
	const withAuth = `{"name":"n","topics":["t"],"endpoint":{"url":"https://billing.example.com/hook","auth":{"bearer_token":"tok1","headers":{"X-Api-Key":"k1"}}}}`
	patch := func(t *testing.T, id, body string) response {
		return e.send(t, req{method: "PATCH", path: "/v1/subscriptions/" + id, token: e.admin,
			header: map[string]string{"Content-Type": "application/merge-patch+json"}, body: body})
	}
	stored := func(t *testing.T, id string) *subscription.Subscription {
		s, err := e.store.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	refused := []struct{ name, body string }{
		{"another host", `{"endpoint":{"url":"https://attacker.example/hook"}}`},
		{"another port", `{"endpoint":{"url":"https://billing.example.com:8443/hook"}}`},
		{"another scheme", `{"endpoint":{"url":"http://billing.example.com/hook"}}`},
		{"a new token but the old headers", `{"endpoint":{"url":"https://attacker.example/hook","auth":{"bearer_token":"tok2"}}}`},
		{"keep_credentials false", `{"endpoint":{"url":"https://attacker.example/hook","keep_credentials":false}}`},
	}
	sub := e.create(t, withAuth)
	for _, tt := range refused {
		t.Run("patch: "+tt.name, func(t *testing.T) {
			before := e.snapshot(t)
			p := wantProblem(t, patch(t, sub.ID, tt.body), http.StatusBadRequest, slugValidation)
			if diff := cmp.Diff([]string{"endpoint.auth"}, fields(p)); diff != "" {
				t.Errorf("errors[].field (-want +got):\n%s", diff)
			}
			e.unchanged(t, before)
		})
	}
	t.Run("put: the body as read, with a new host", func(t *testing.T) {
		r := e.send(t, req{method: "GET", path: "/v1/subscriptions/" + sub.ID, token: e.admin})
		var m map[string]any
		if err := json.Unmarshal(r.body, &m); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"id", "created_at", "updated_at", "version", "signing"} {
			delete(m, k)
		}
		m["endpoint"].(map[string]any)["url"] = "https://attacker.example/hook"
		b, _ := json.Marshal(m)
		before := e.snapshot(t)
		p := wantProblem(t, e.send(t, req{method: "PUT", path: "/v1/subscriptions/" + sub.ID, token: e.admin,
			header: map[string]string{"Content-Type": "application/json"}, body: string(b)}), http.StatusBadRequest, slugValidation)
		if diff := cmp.Diff([]string{"endpoint.auth"}, fields(p)); diff != "" {
			t.Errorf("errors[].field (-want +got):\n%s", diff)
		}
		e.unchanged(t, before)
	})

	accepted := []struct {
		name, body string
		want       *subscription.EndpointAuth
	}{
		{"the same origin, another path", `{"endpoint":{"url":"https://billing.example.com/v2/hook"}}`,
			&subscription.EndpointAuth{BearerToken: "tok1", Headers: map[string]string{"X-Api-Key": "k1"}}},
		{"explicitly kept", `{"endpoint":{"url":"https://new.example.com/hook","keep_credentials":true}}`,
			&subscription.EndpointAuth{BearerToken: "tok1", Headers: map[string]string{"X-Api-Key": "k1"}}},
		{"sent again", `{"endpoint":{"url":"https://billing.example.com/hook","auth":{"bearer_token":"tok3","headers":{"X-Api-Key":"k3"}}}}`,
			&subscription.EndpointAuth{BearerToken: "tok3", Headers: map[string]string{"X-Api-Key": "k3"}}},
		{"dropped", `{"endpoint":{"url":"https://other.example.com/hook","auth":null}}`, nil},
	}
	for _, tt := range accepted {
		t.Run("patch: "+tt.name, func(t *testing.T) {
			if r := patch(t, sub.ID, tt.body); r.status != http.StatusOK {
				t.Fatalf("PATCH = %d %s, want 200", r.status, r.body)
			}
			got := stored(t, sub.ID)
			if diff := cmp.Diff(tt.want, got.Endpoint.Auth); diff != "" {
				t.Errorf("stored auth (-want +got):\n%s", diff)
			}
			if got.Endpoint.KeepCredentials {
				t.Errorf("keep_credentials was stored: it applies to one request only")
			}
		})
	}
	t.Run("put: a new host without credentials", func(t *testing.T) {
		s := e.create(t, withAuth)
		r := e.send(t, req{method: "PUT", path: "/v1/subscriptions/" + s.ID, token: e.admin,
			header: map[string]string{"Content-Type": "application/json"},
			body:   `{"name":"n","topics":["t"],"endpoint":{"url":"https://elsewhere.example/hook"}}`})
		if r.status != http.StatusOK {
			t.Fatalf("PUT = %d %s, want 200", r.status, r.body)
		}
		if a := stored(t, s.ID).Endpoint.Auth; a != nil {
			t.Errorf("stored auth = %+v, want none", a)
		}
	})
}

// TestPrintedTextRefusesControlCharacters defends the CLI's tables and
// every request keyhook builds from a subscription's free text.
func TestPrintedTextRefusesControlCharacters(t *testing.T) {
	e := newEnv(t)
	base := map[string]any{"name": "n", "topics": []string{"t"}, "endpoint": map[string]any{"url": "https://h.example/"}}
	tests := []struct {
		field, value string
	}{
		{"name", "\x1b[31mred\x1b[0m"},
		{"name", "a\r\nsub_fake  fake-row"},
		{"name", "nul\x00"},
		{"name", "right-to-left \u202e override"},
		{"name", "c1 \u009b control"},
		{"content_type", "application/json\r\nX-Injected: 1"},
		{"content_type", "text/plain\x00"},
		{"content_type", "not a media type"},
		{"cloudevents_type", "com.example\nevil"},
		{"cloudevents_type", "nul\x00"},
	}
	before := e.snapshot(t)
	for _, tt := range tests {
		t.Run(tt.field+" "+strings.ToValidUTF8(tt.value, "?"), func(t *testing.T) {
			m := map[string]any{}
			for k, v := range base {
				m[k] = v
			}
			m[tt.field] = tt.value
			b, _ := json.Marshal(m)
			p := wantProblem(t, e.do(t, "POST", "/v1/subscriptions", string(b)), http.StatusBadRequest, slugValidation)
			if diff := cmp.Diff([]string{tt.field}, fields(p)); diff != "" {
				t.Errorf("errors[].field (-want +got):\n%s", diff)
			}
			e.unchanged(t, before)
		})
	}
}

// TestNumbersAndNullsAreJudgedAsTheSpecSays defends the JSON Schema
// reading of numbers (an integer-valued number is an integer), the bounds
// of every integer (checked before any multiplication), and null refused
// where the spec does not allow it.
func TestNumbersAndNullsAreJudgedAsTheSpecSays(t *testing.T) {
	e := newEnv(t)
	sub := e.create(t, validBody)
	id := "/v1/subscriptions/" + sub.ID
	withField := func(extra string) string { return strings.TrimSuffix(validBody, "}") + "," + extra + "}" }

	refused := []struct {
		name, method, path, body, slug string
		fields                         []string
	}{
		{"rotate: overlap that overflows a Duration", "POST", id + "/signing/rotate", `{"overlap_seconds":9223372037}`, slugValidation, []string{"overlap_seconds"}},
		{"rotate: overlap of null", "POST", id + "/signing/rotate", `{"overlap_seconds":null}`, slugInvalidJSON, []string{"overlap_seconds"}},
		{"create: max_elapsed_ms that overflows a Duration", "POST", "/v1/subscriptions", withField(`"retry":{"max_elapsed_ms":18446744073710}`), slugValidation, []string{"retry.max_elapsed_ms"}},
		{"create: a fraction where an integer goes", "POST", "/v1/subscriptions", withField(`"retry":{"max_attempts":2.5}`), slugInvalidJSON, []string{"retry.max_attempts"}},
		{"create: paused null", "POST", "/v1/subscriptions", withField(`"paused":null`), slugInvalidJSON, []string{"paused"}},
		{"create: nested null", "POST", "/v1/subscriptions", withField(`"retry":{"jitter":null}`), slugInvalidJSON, []string{"retry.jitter"}},
		{"put: paused null", "PUT", id, withField(`"paused":null`), slugInvalidJSON, []string{"paused"}},
		{"redrive: all null", "POST", id + "/dead-letters/redrive", `{"all":null}`, slugInvalidJSON, []string{"all"}},
		{"test: key null", "POST", id + "/test", `{"key":null}`, slugInvalidJSON, []string{"key"}},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			before := e.snapshot(t)
			p := wantProblem(t, e.do(t, tt.method, tt.path, tt.body), http.StatusBadRequest, tt.slug)
			if diff := cmp.Diff(tt.fields, fields(p)); diff != "" {
				t.Errorf("errors[].field (-want +got):\n%s\nproblem: %+v", diff, p)
			}
			e.unchanged(t, before)
		})
	}

	accepted := []struct {
		name, body string
		check      func(s *subscription.Subscription) bool
	}{
		{"0.0 is the integer 0", withField(`"endpoint":{"url":"https://h.example/","timeout_ms":0.0}`), func(s *subscription.Subscription) bool { return s.Endpoint.TimeoutMS == 0 }},
		{"10.0 is the integer 10", strings.Replace(validBody, `"max_in_flight":10`, `"max_in_flight":10.0`, 1), func(s *subscription.Subscription) bool { return s.MaxInFlight == 10 }},
		{"1e2 is the integer 100", strings.Replace(validBody, `"max_in_flight":10`, `"max_in_flight":1e2`, 1), func(s *subscription.Subscription) bool { return s.MaxInFlight == 100 }},
		{"a month of retrying", withField(`"retry":{"max_elapsed_ms":2592000000}`), func(s *subscription.Subscription) bool { return s.Retry.MaxElapsedMS == 2592000000 }},
	}
	for _, tt := range accepted {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(t, "POST", "/v1/subscriptions", tt.body)
			if r.status != http.StatusCreated {
				t.Fatalf("POST = %d %s, want 201", r.status, r.body)
			}
			var s subscription.Subscription
			if err := json.Unmarshal(r.body, &s); err != nil || !tt.check(&s) {
				t.Errorf("created %s (%v): not the value sent", r.body, err)
			}
		})
	}
	t.Run("rotate: a whole-valued overlap", func(t *testing.T) {
		if r := e.do(t, "POST", id+"/signing/rotate", `{"overlap_seconds":60.0}`); r.status != http.StatusOK {
			t.Errorf("rotate = %d %s, want 200", r.status, r.body)
		}
	})
}

// TestMetricsNeedATokenByDefault defends /metrics, which names endpoint
// origins: a token with the metrics scope (or admin) unless the operator
// opts out.
func TestMetricsNeedATokenByDefault(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("up 1\n")) })
	e := newEnvWith(t, envOptions{config: func(c *Config) { c.Metrics = metrics }})
	scraper, _, err := e.tokens.Create(context.Background(), "scraper", []auth.Scope{auth.ScopeMetrics})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, token string
		status      int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"a read token", e.reader, http.StatusForbidden},
		{"a write token", e.writer, http.StatusForbidden},
		{"the metrics scope", scraper, http.StatusOK},
		{"admin", e.admin, http.StatusOK},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if r := e.send(t, req{method: "GET", path: "/metrics", token: tt.token}); r.status != tt.status {
				t.Errorf("GET /metrics = %d, want %d", r.status, tt.status)
			}
		})
	}
	public := newEnvWith(t, envOptions{config: func(c *Config) { c.Metrics, c.MetricsPublic = metrics, true }})
	if r := public.send(t, req{method: "GET", path: "/metrics"}); r.status != http.StatusOK {
		t.Errorf("GET /metrics with MetricsPublic = %d, want 200", r.status)
	}
}

// TestReadOnlyTokensSeeNoBasicUsername defends the one endpoint
// credential that answers used to show in clear to any reader.
func TestReadOnlyTokensSeeNoBasicUsername(t *testing.T) {
	e := newEnv(t)
	sub := e.create(t, `{"name":"n","topics":["t"],"endpoint":{"url":"https://h.example/","auth":{"basic_username":"billing-svc","basic_password":"pw"}}}`)
	for _, tt := range []struct {
		name, token, path, want string
	}{
		{"reader, one", e.reader, "/v1/subscriptions/" + sub.ID, redacted},
		{"reader, list", e.reader, "/v1/subscriptions", redacted},
		{"admin, one", e.admin, "/v1/subscriptions/" + sub.ID, "billing-svc"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := e.send(t, req{method: "GET", path: tt.path, token: tt.token})
			if r.status != http.StatusOK {
				t.Fatalf("GET = %d %s", r.status, r.body)
			}
			if strings.Contains(string(r.body), "billing-svc") != (tt.want == "billing-svc") ||
				!strings.Contains(string(r.body), `"basic_username":"`+tt.want+`"`) {
				t.Errorf("answer %s, want basic_username %q", r.body, tt.want)
			}
		})
	}
}

// TestWriteOnlyTokensGetAReceiptNotTheSubscription defends read scope:
// a token that may only write learns nothing from the answer to a change
// beyond what it changed (an empty PATCH used to read the whole
// subscription).
func TestWriteOnlyTokensGetAReceiptNotTheSubscription(t *testing.T) {
	e := newEnv(t)
	sub := e.create(t, `{"name":"secret name","topics":["t"],"endpoint":{"url":"https://h.example/private"}}`)
	id := "/v1/subscriptions/" + sub.ID
	jsonCT := map[string]string{"Content-Type": "application/json"}
	for _, tt := range []struct {
		name, method, path, body string
		header                   map[string]string
	}{
		{"empty patch", "PATCH", id, `{}`, map[string]string{"Content-Type": "application/merge-patch+json"}},
		{"pause", "POST", id + "/pause", "", nil},
		{"resume", "POST", id + "/resume", "", nil},
		{"rotate", "POST", id + "/signing/rotate", "", jsonCT},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := e.send(t, req{method: tt.method, path: tt.path, token: e.writer, header: tt.header, body: tt.body})
			if r.status != http.StatusOK {
				t.Fatalf("%s = %d %s, want 200", tt.method, r.status, r.body)
			}
			var got map[string]any
			if err := json.Unmarshal(r.body, &got); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"name", "topics", "endpoint"} {
				if _, ok := got[k]; ok {
					t.Errorf("answer to a write-only token shows %q: %s", k, r.body)
				}
			}
			if got["id"] != sub.ID || got["version"] == nil || r.header.Get("ETag") == "" {
				t.Errorf("receipt %s (ETag %q) lacks the id, version or ETag", r.body, r.header.Get("ETag"))
			}
		})
	}
	t.Run("rotate shows the secret it made", func(t *testing.T) {
		r := e.send(t, req{method: "POST", path: id + "/signing/rotate", token: e.writer, header: jsonCT})
		if !strings.Contains(string(r.body), `"secret":"whsec_`) {
			t.Errorf("rotate receipt %s does not show the new secret", r.body)
		}
	})
	t.Run("admin still reads the answer", func(t *testing.T) {
		r := e.send(t, req{method: "PATCH", path: id, token: e.admin, header: map[string]string{"Content-Type": "application/merge-patch+json"}, body: `{}`})
		if !strings.Contains(string(r.body), "secret name") {
			t.Errorf("admin PATCH answer %s lacks the subscription", r.body)
		}
	})
}
