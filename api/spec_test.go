package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/go-chi/chi/v5"

	"github.com/keyhook/keyhook/console"
	"github.com/keyhook/keyhook/deliverylog"
	"github.com/keyhook/keyhook/nodes"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
)

// specPath is the contract, at the repository root.
const specPath = "../openapi.yaml"

// specServer is the server URL requests are matched against: the spec's
// first server, whatever port the test server listens on.
const specServer = "http://127.0.0.1:8080"

func loadSpec(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(specPath)
	if err != nil {
		t.Fatalf("load %s: %v", specPath, err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Errorf("%s is OpenAPI %s, want 3.1", specPath, doc.OpenAPI)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("%s is not a valid OpenAPI document: %v", specPath, err)
	}
	return doc
}

// specRouter builds the router the way serve does, with every optional
// route (metrics) on.
func specRouter(t *testing.T) http.Handler {
	t.Helper()
	e := newEnvWith(t, envOptions{config: func(c *Config) { c.Metrics = http.NotFoundHandler() }})
	h, err := NewRouter(Dependencies{Store: e.store, URLs: refusingChecker{}, Status: e.status, Seeker: e.seeker, Starts: e.starts,
		DeadLetters: e.dead, Tester: &WebhookTester{}, Nodes: e.nodes, Auth: e.tokens, Keys: e.keys}, Config{Metrics: http.NotFoundHandler()})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestSpecAndRouterListTheSameRoutes(t *testing.T) {
	doc := loadSpec(t)
	var inSpec, routed []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			inSpec = append(inSpec, method+" "+path)
		}
	}
	err := chi.Walk(specRouter(t).(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		// The console is static files, not API: console's own tests and
		// TestConsoleIsServedWithItsHeaders check it.
		if route == "/console" || strings.HasPrefix(route, console.Prefix) {
			return nil
		}
		routed = append(routed, method+" "+route)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(inSpec)
	sort.Strings(routed)
	if diff := diffSets(inSpec, routed); diff != "" {
		t.Errorf("openapi.yaml and the router disagree:\n%s", diff)
	}
}

func diffSets(spec, routed []string) string {
	var b strings.Builder
	for _, s := range spec {
		if !slices.Contains(routed, s) {
			fmt.Fprintf(&b, "  in the spec, not routed: %s\n", s)
		}
	}
	for _, r := range routed {
		if !slices.Contains(spec, r) {
			fmt.Fprintf(&b, "  routed, not in the spec: %s\n", r)
		}
	}
	return b.String()
}

// TestSpecSchemasMatchTheGoTypes checks each schema's properties against
// the JSON fields of the type that is encoded or decoded for it, and, for
// answers, that exactly the fields always present are required: a field
// added to a Go type without the spec fails here even before a response
// carries it.
func TestSpecSchemasMatchTheGoTypes(t *testing.T) {
	doc := loadSpec(t)
	for _, tt := range []struct {
		schema   string
		typ      reflect.Type
		response bool
		skip     []string
	}{
		{"Subscription", reflect.TypeFor[subscription.Subscription](), true, nil},
		{"SubscriptionInput", reflect.TypeFor[subscription.Subscription](), false, readOnlyFields},
		{"SubscriptionPatch", reflect.TypeFor[subscription.Subscription](), false, readOnlyFields},
		{"Endpoint", reflect.TypeFor[subscription.Endpoint](), false, nil},
		{"EndpointAuth", reflect.TypeFor[subscription.EndpointAuth](), true, nil},
		{"RetryPolicy", reflect.TypeFor[subscription.RetryPolicy](), true, nil},
		{"Signing", reflect.TypeFor[subscription.Signing](), true, nil},
		{"SigningSecret", reflect.TypeFor[subscription.SigningSecret](), true, nil},
		{"SubscriptionList", reflect.TypeFor[listResponse](), true, nil},
		{"Status", reflect.TypeFor[subscription.Status](), true, nil},
		{"PartitionStatus", reflect.TypeFor[subscription.PartitionStatus](), true, nil},
		{"SeekRequest", reflect.TypeFor[seekBody](), false, nil},
		{"SeekOffset", reflect.TypeFor[subscription.SeekOffset](), false, nil},
		{"SeekResult", reflect.TypeFor[subscription.SeekResult](), true, nil},
		{"SeekedPartition", reflect.TypeFor[subscription.SeekedPartition](), true, nil},
		{"TestRequest", reflect.TypeFor[TestRequest](), false, nil},
		{"TestResult", reflect.TypeFor[TestResult](), true, nil},
		{"DeadLetter", reflect.TypeFor[subscription.DeadLetter](), true, nil},
		{"DeadLetterPage", reflect.TypeFor[subscription.DeadLetterPage](), true, nil},
		{"DeliveryAttempt", reflect.TypeFor[deliverylog.Attempt](), true, nil},
		{"Delivery", reflect.TypeFor[deliverylog.Delivery](), true, nil},
		{"DeliverySummary", reflect.TypeFor[deliverylog.Summary](), true, nil},
		{"DeliveryLogPage", reflect.TypeFor[deliverylog.Page](), true, nil},
		{"RedriveRequest", reflect.TypeFor[redriveRequest](), false, nil},
		{"RedriveResult", reflect.TypeFor[redriveResponse](), true, nil},
		{"Ownership", reflect.TypeFor[nodes.Ownership](), true, nil},
		{"Node", reflect.TypeFor[nodes.Info](), true, nil},
		{"NodeList", reflect.TypeFor[nodesResponse](), true, nil},
		{"TokenInfo", reflect.TypeFor[tokenResponse](), true, nil},
		{"Ready", reflect.TypeFor[readyResponse](), true, nil},
		{"Problem", reflect.TypeFor[problem](), true, nil},
		{"FieldError", reflect.TypeFor[subscription.FieldError](), true, nil},
	} {
		ref := doc.Components.Schemas[tt.schema]
		if ref == nil || ref.Value == nil {
			t.Errorf("schema %s is missing", tt.schema)
			continue
		}
		s := ref.Value
		var goNames, required []string
		for i := 0; i < tt.typ.NumField(); i++ {
			f := tt.typ.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !f.IsExported() || name == "-" || slices.Contains(tt.skip, name) {
				continue
			}
			goNames = append(goNames, name)
			if !strings.Contains(opts, "omit") {
				required = append(required, name)
			}
		}
		var specNames []string
		for name := range s.Properties {
			specNames = append(specNames, name)
		}
		sort.Strings(goNames)
		sort.Strings(specNames)
		if diff := diffSets(specNames, goNames); diff != "" {
			t.Errorf("schema %s and %v disagree (spec = spec, routed = Go):\n%s", tt.schema, tt.typ, diff)
		}
		if s.AdditionalProperties.Has == nil || *s.AdditionalProperties.Has {
			t.Errorf("schema %s allows additional properties; the API refuses (or never sends) them", tt.schema)
		}
		if tt.response {
			specRequired := append([]string(nil), s.Required...)
			sort.Strings(specRequired)
			sort.Strings(required)
			if diff := diffSets(specRequired, required); diff != "" {
				t.Errorf("schema %s: required fields disagree with the fields %v always encodes:\n%s", tt.schema, tt.typ, diff)
			}
		}
	}
}

// conformance sends real requests to real servers and validates each
// answer against the spec, recording which documented responses were
// seen.
type conformance struct {
	t      *testing.T
	doc    *openapi3.T
	router routers.Router
	seen   map[string]bool
}

func newConformance(t *testing.T) *conformance {
	doc := loadSpec(t)
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &conformance{t: t, doc: doc, router: router, seen: make(map[string]bool)}
}

// send sends r to e, validates the answer, and returns it. When
// validRequest is set, the request is validated against the spec too.
func (c *conformance) send(e *env, r req, want int, validRequest bool) response {
	t := c.t
	t.Helper()
	resp := e.send(t, r)
	if resp.status != want {
		t.Errorf("%s %s: status %d, want %d; body %s", r.method, r.path, resp.status, want, resp.body)
	}
	// The route is found on a copy aimed at the spec's server.
	match, err := http.NewRequest(r.method, specServer+r.path, strings.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range r.header {
		match.Header.Set(k, v)
	}
	if r.token != "" {
		match.Header.Set("Authorization", "Bearer "+r.token)
	}
	route, params, err := c.router.FindRoute(match)
	if err != nil || route.Method != r.method || !templateMatches(route.Path, strings.SplitN(r.path, "?", 2)[0]) {
		// Not a documented operation (unknown path or method): the answer
		// must still be a documented problem.
		if resp.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s %s: undocumented route answered %q", r.method, r.path, resp.header.Get("Content-Type"))
		}
		var v any
		if err := json.Unmarshal(resp.body, &v); err != nil {
			t.Fatalf("%s %s: %v", r.method, r.path, err)
		}
		if err := c.doc.Components.Schemas["Problem"].Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
			t.Errorf("%s %s: answer is not a Problem: %v\n%s", r.method, r.path, err, resp.body)
		}
		return resp
	}
	reqInput := &openapi3filter.RequestValidationInput{
		Request: match, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true},
	}
	if validRequest {
		if err := openapi3filter.ValidateRequest(context.Background(), reqInput); err != nil {
			t.Errorf("%s %s: a request the API accepts does not match the spec: %v", r.method, r.path, err)
		}
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: reqInput,
		Status:                 resp.status,
		Header:                 resp.header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	in.SetBodyBytes(resp.body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		t.Errorf("%s %s: answer %d does not match the spec: %v\n%s", r.method, r.path, resp.status, err, resp.body)
	}
	c.seen[fmt.Sprintf("%s %s %d", route.Method, route.Path, resp.status)] = true
	return resp
}

// templateMatches reports whether path fills the path template tmpl, a
// parameter standing for exactly one non-empty segment (the legacy router
// also lets it match nothing).
func templateMatches(tmpl, path string) bool {
	ts, ps := strings.Split(tmpl, "/"), strings.Split(path, "/")
	if len(ts) != len(ps) {
		return false
	}
	for i := range ts {
		if strings.HasPrefix(ts[i], "{") {
			if ps[i] == "" {
				return false
			}
			continue
		}
		if ts[i] != ps[i] {
			return false
		}
	}
	return true
}

// unseen lists the documented responses no request produced.
func (c *conformance) unseen() []string {
	var out []string
	for path, item := range c.doc.Paths.Map() {
		for method, op := range item.Operations() {
			for code := range op.Responses.Map() {
				if code == "default" {
					continue
				}
				if k := method + " " + path + " " + code; !c.seen[k] {
					out = append(out, k)
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// TestRealAnswersMatchTheSpec drives every documented response of every
// route out of real servers (a real Redis, a real endpoint) and validates
// status, headers and body against openapi.yaml; then checks that no
// documented response went unseen.
func TestRealAnswersMatchTheSpec(t *testing.T) {
	c := newConformance(t)
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "keyhook_up 1\n")
	})
	e := newEnvWith(t, envOptions{config: func(cfg *Config) { cfg.Metrics, cfg.MetricsPublic = metrics, true }})
	locked := newEnvWith(t, envOptions{config: func(cfg *Config) { cfg.Metrics = metrics }})
	broken := newEnvWith(t, envOptions{brokenStore: true})
	endpoint := httptest.NewServer(&recordingEndpoint{status: 202, body: "ok"})
	t.Cleanup(endpoint.Close)

	sub := e.create(t, `{"name":"spec","topics":["orders","refunds"],"endpoint":{"url":"`+endpoint.URL+`/hook"}}`)
	victim := e.create(t, validBody) // deleted by the DELETE case
	e.status.set(statusFixture(sub.ID), nil)
	e.dead.items = []subscription.DeadLetter{deadLetterFixture()}
	stopNode := runNode(t, e)
	defer stopNode()

	id := "/v1/subscriptions/" + sub.ID
	jsonCT := map[string]string{"Content-Type": "application/json"}
	goodBody := map[string]string{
		"POST /v1/subscriptions":                           validBody,
		"PUT /v1/subscriptions/{id}":                       `{"name":"spec","topics":["orders","refunds"],"endpoint":{"url":"` + endpoint.URL + `/hook","timeout_ms":2000},"ordering":"none","max_in_flight":9,"start":"latest","dead_letter_topic":"dlq","paused":false}`,
		"PATCH /v1/subscriptions/{id}":                     `{"max_in_flight":12,"ordering":null}`,
		"POST /v1/subscriptions/{id}/seek":                 `{"to":"offsets","offsets":[{"topic":"orders","partition":1,"offset":7}]}`,
		"POST /v1/subscriptions/{id}/signing/rotate":       `{"overlap_seconds":3600}`,
		"POST /v1/subscriptions/{id}/test":                 `{"value":{"order":1},"key":"k"}`,
		"POST /v1/subscriptions/{id}/dead-letters/redrive": `{"ids":["dlv_x"]}`,
	}

	// The answers that succeed, in an order that keeps the fixtures.
	c.send(e, req{method: "GET", path: "/healthz"}, 200, true)
	c.send(e, req{method: "GET", path: "/readyz"}, 200, true)
	c.send(e, req{method: "GET", path: "/metrics"}, 200, true)
	c.send(locked, req{method: "GET", path: "/metrics", token: locked.admin}, 200, true)
	c.send(locked, req{method: "GET", path: "/metrics", token: locked.reader}, 403, false)
	c.send(e, req{method: "POST", path: "/v1/subscriptions", token: e.writer, header: map[string]string{"Content-Type": "application/json", "Idempotency-Key": "spec-1"}, body: validBody}, 201, true)
	c.send(e, req{method: "POST", path: "/v1/subscriptions", token: e.writer, header: map[string]string{"Content-Type": "application/json", "Idempotency-Key": "spec-1"}, body: validBody}, 201, true)
	c.send(e, req{method: "GET", path: "/v1/subscriptions?limit=1&topic=orders", token: e.reader}, 200, true)
	c.send(e, req{method: "GET", path: id, token: e.reader}, 200, true)
	c.send(e, req{method: "PUT", path: id, token: e.writer, header: jsonCT, body: goodBody["PUT /v1/subscriptions/{id}"]}, 200, true)
	c.send(e, req{method: "PATCH", path: id, token: e.writer, header: map[string]string{"Content-Type": "application/merge-patch+json"}, body: goodBody["PATCH /v1/subscriptions/{id}"]}, 200, true)
	c.send(e, req{method: "PATCH", path: id, token: e.admin, header: map[string]string{"Content-Type": "application/merge-patch+json"}, body: `{"max_in_flight":13}`}, 200, true)
	c.send(e, req{method: "POST", path: id + "/pause", token: e.writer}, 200, true)
	c.send(e, req{method: "POST", path: id + "/resume", token: e.writer}, 200, true)
	c.send(e, req{method: "POST", path: id + "/signing/rotate", token: e.writer, header: jsonCT, body: goodBody["POST /v1/subscriptions/{id}/signing/rotate"]}, 200, true)
	c.send(e, req{method: "POST", path: id + "/signing/rotate", token: e.writer}, 200, true)
	c.send(e, req{method: "POST", path: id + "/seek", token: e.writer, header: jsonCT, body: goodBody["POST /v1/subscriptions/{id}/seek"]}, 200, true)
	c.send(e, req{method: "POST", path: id + "/seek", token: e.writer, header: jsonCT, body: `{"to":"timestamp","timestamp":"2030-01-02T03:04:05.5Z"}`}, 200, true)
	c.send(e, req{method: "GET", path: id + "/status", token: e.reader}, 200, true)
	now := time.Now()
	flushKeys(t, e, sub.ID, sub.Topics[0], 0, "node-a", tracking.StalledKeys{Keys: []tracking.StalledKey{
		{Key: "k", Offset: 3, State: "retrying", Since: now, Dispatched: now, Attempts: 2, LastStatus: 503, LastError: "503", NextAttempt: now.Add(time.Minute), Behind: 1},
		{KeyBase64: "AAE=", KeyTruncated: true, Offset: 4, State: "parked", Since: now, Behind: 9, Parked: 9},
	}, Total: 2})
	c.send(e, req{method: "GET", path: id + "/keys?state=parked,retrying&partition=0&limit=10", token: e.reader}, 200, true)
	c.send(e, req{method: "POST", path: id + "/test", token: e.writer, header: jsonCT, body: goodBody["POST /v1/subscriptions/{id}/test"]}, 200, true)
	c.send(e, req{method: "POST", path: id + "/test", token: e.writer}, 200, true)
	c.send(e, req{method: "GET", path: id + "/dead-letters?limit=10", token: e.reader}, 200, true)
	c.send(e, req{method: "POST", path: id + "/dead-letters/redrive", token: e.writer, header: jsonCT, body: `{"all":true}`}, 200, true)
	logDelivery(t, e,
		deliverylog.Entry{Subscription: sub.ID, DeliveryID: "dlv_spec", Topic: "orders", Partition: 1, Offset: 7,
			Attempt: deliverylog.Attempt{Number: 1, Time: now, Status: 503, LatencyMS: 2.5, Result: deliverylog.ResultRetry, Body: "busy",
				Headers: map[string]string{"Content-Type": "text/plain", "Retry-After": "1s"}}},
		deliverylog.Entry{Subscription: sub.ID, DeliveryID: "dlv_spec", Topic: "orders", Partition: 1, Offset: 7,
			Attempt: deliverylog.Attempt{Number: 2, Time: now.Add(time.Second), Status: 200, LatencyMS: 1, Result: deliverylog.ResultDelivered}})
	c.send(e, req{method: "GET", path: id + "/deliveries?status=failed&limit=10", token: e.reader}, 200, true)
	c.send(e, req{method: "GET", path: id + "/deliveries/dlv_spec", token: e.reader}, 200, true)
	c.send(e, req{method: "GET", path: "/v1/nodes", token: e.reader}, 200, true)
	c.send(e, req{method: "GET", path: "/v1/token", token: e.reader}, 200, true)
	c.send(e, req{method: "DELETE", path: "/v1/subscriptions/" + victim.ID, token: e.writer}, 204, true)

	// 400s, one or more per route that reads input.
	for _, r := range []req{
		{method: "POST", path: "/v1/subscriptions", body: `{"name":1}`},
		{method: "POST", path: "/v1/subscriptions", body: `{"name":"n","topics":["t"],"endpoint":{"url":"https://x.blocked.test/"}}`},
		{method: "POST", path: "/v1/subscriptions", header: map[string]string{"Idempotency-Key": strings.Repeat("k", 300)}, body: validBody},
		{method: "GET", path: "/v1/subscriptions?limit=0"},
		{method: "GET", path: "/v1/subscriptions?cursor=forged"},
		{method: "PUT", path: id, body: `{"id":"sub_x"}`},
		{method: "PATCH", path: id, body: `{"colour":"red"}`},
		{method: "POST", path: id + "/seek", body: `{"to":"timestamp"}`},
		{method: "POST", path: id + "/signing/rotate", body: `{"overlap_seconds":-1}`},
		{method: "POST", path: id + "/test", body: `{"value":`},
		{method: "GET", path: id + "/dead-letters?limit=0"},
		{method: "GET", path: id + "/keys?state=stuck"},
		{method: "GET", path: id + "/deliveries?status=ok"},
		{method: "GET", path: id + "/deliveries/dlv_spec?limit=1"},
		{method: "POST", path: id + "/dead-letters/redrive", body: `{}`},
	} {
		r.token = e.admin
		if r.header == nil {
			r.header = jsonCT
		} else {
			r.header["Content-Type"] = "application/json"
		}
		c.send(e, r, 400, false)
	}
	// 422: a key reused with another body.
	c.send(e, req{method: "POST", path: "/v1/subscriptions", token: e.writer, header: map[string]string{"Content-Type": "application/json", "Idempotency-Key": "spec-1"},
		body: strings.Replace(validBody, "orders to billing", "other", 1)}, 422, false)
	// 401 on /metrics when it needs a token; 503 when a backend is down.
	c.send(locked, req{method: "GET", path: "/metrics"}, 401, false)
	e.setReady("kafka", errors.New("down"))
	c.send(e, req{method: "GET", path: "/readyz"}, 503, false)
	e.setReady("kafka", nil)
	// 503 from status and seek while Kafka does not answer yet.
	unavailable := fmt.Errorf("%w: COORDINATOR_NOT_AVAILABLE", subscription.ErrUnavailable)
	e.status.set(nil, unavailable)
	c.send(e, req{method: "GET", path: id + "/status", token: e.reader}, 503, false)
	e.parts.fail(unavailable)
	c.send(e, req{method: "GET", path: id + "/keys", token: e.reader}, 503, false)
	e.parts.fail(nil)
	e.status.set(statusFixture(sub.ID), nil)
	e.seeker.err = unavailable
	c.send(e, req{method: "POST", path: id + "/seek", token: e.writer, header: jsonCT, body: `{"to":"latest"}`}, 503, false)
	e.seeker.err = nil
	// 503 on a create when Kafka does not answer as the start is fixed.
	e.starts.fail(errors.New("down"))
	c.send(e, req{method: "POST", path: "/v1/subscriptions", token: e.writer, header: map[string]string{"Content-Type": "application/json"},
		body: strings.Replace(validBody, `["orders"]`, `["spec-starts"]`, 1)}, 503, false)
	e.starts.fail(nil)

	// 503 on every change while the config topic does not acknowledge it:
	// the subscription, stored before, is left as it was.
	refusing := newEnvWith(t, envOptions{configLog: refusingLog{}})
	plain, err := subscription.New(refusing.rdb, subscription.Config{})
	if err != nil {
		t.Fatal(err)
	}
	kept := &subscription.Subscription{Name: "kept", Topics: []string{"orders"}, Endpoint: subscription.Endpoint{URL: endpoint.URL + "/hook"}}
	if err := plain.Create(context.Background(), kept); err != nil {
		t.Fatal(err)
	}
	keptPath := "/v1/subscriptions/" + kept.ID
	mergeCT := map[string]string{"Content-Type": "application/merge-patch+json"}
	c.send(refusing, req{method: "PUT", path: keptPath, token: refusing.writer, header: jsonCT, body: goodBody["PUT /v1/subscriptions/{id}"]}, 503, false)
	c.send(refusing, req{method: "PATCH", path: keptPath, token: refusing.writer, header: mergeCT, body: goodBody["PATCH /v1/subscriptions/{id}"]}, 503, false)
	c.send(refusing, req{method: "POST", path: keptPath + "/pause", token: refusing.writer}, 503, false)
	c.send(refusing, req{method: "POST", path: keptPath + "/signing/rotate", token: refusing.writer, header: jsonCT, body: goodBody["POST /v1/subscriptions/{id}/signing/rotate"]}, 503, false)
	c.send(refusing, req{method: "DELETE", path: keptPath, token: refusing.writer}, 503, false)
	if _, err := plain.Update(context.Background(), kept.ID, subscription.AnyVersion, func(s *subscription.Subscription) error { s.Paused = true; return nil }); err != nil {
		t.Fatal(err)
	}
	c.send(refusing, req{method: "POST", path: keptPath + "/resume", token: refusing.writer}, 503, false)
	if got, err := plain.Get(context.Background(), kept.ID); err != nil || got.Version != 2 {
		t.Errorf("after refused changes the subscription is %+v, %v; want it as stored, version 2", got, err)
	}

	// Generated: every /v1 route without a token, with the wrong scope,
	// on an unknown subscription, with a stale If-Match, an oversized or
	// non-JSON body, and on a store that fails.
	var v1 [][2]string
	for _, rt := range routes(t, specRouter(t)) {
		if strings.HasPrefix(rt[1], "/v1/") {
			v1 = append(v1, rt)
		}
	}
	for _, rt := range v1 {
		method, tmpl := rt[0], rt[1]
		key := method + " " + tmpl
		body := goodBody[key]
		header := map[string]string{}
		if body != "" {
			header["Content-Type"] = "application/json"
		}
		path := strings.ReplaceAll(tmpl, "{id}", sub.ID)
		wrong := e.writer
		if method != http.MethodGet {
			wrong = e.reader
		}
		c.send(e, req{method: method, path: path, header: header, body: body}, 401, false)
		c.send(e, req{method: method, path: path, token: wrong, header: header, body: body}, 403, false)
		if tmpl != "/v1/token" { // it reads nothing but the token itself
			c.send(broken, req{method: method, path: path, token: broken.admin, header: header, body: body}, 500, false)
		}
		if strings.Contains(tmpl, "{id}") {
			c.send(e, req{method: method, path: strings.ReplaceAll(tmpl, "{id}", "sub_aaaaaaaaaaaaaaaaaaaa"), token: e.admin, header: header, body: body}, 404, false)
		}
		if method == http.MethodPut || method == http.MethodPatch || method == http.MethodDelete ||
			strings.HasSuffix(tmpl, "/pause") || strings.HasSuffix(tmpl, "/resume") || strings.HasSuffix(tmpl, "/signing/rotate") {
			h := map[string]string{"If-Match": `"` + sub.ID + `.v999"`}
			for k, v := range header {
				h[k] = v
			}
			c.send(e, req{method: method, path: path, token: e.admin, header: h, body: body}, 412, false)
		}
		if body != "" {
			c.send(e, req{method: method, path: path, token: e.admin, header: header, body: `{"name":"` + strings.Repeat("x", DefaultMaxBodyBytes) + `"}`}, 413, false)
			c.send(e, req{method: method, path: path, token: e.admin, header: map[string]string{"Content-Type": "text/plain"}, body: body}, 415, false)
		}
	}

	// Undocumented routes and methods still answer documented problems.
	c.send(e, req{method: "GET", path: "/v2/anything", token: e.admin}, 404, false)
	c.send(e, req{method: "DELETE", path: "/v1/subscriptions", token: e.admin}, 405, false)

	if unseen := c.unseen(); len(unseen) > 0 {
		t.Errorf("documented responses no real request produced (document only what happens):\n  %s", strings.Join(unseen, "\n  "))
	}
}

// refusingLog is a config log that acknowledges nothing, as when Kafka
// does not answer.
type refusingLog struct{}

func (refusingLog) Put(context.Context, string, string, int64, []byte) error {
	return errors.New("configlog: kafka did not acknowledge the write")
}

func (refusingLog) Restate(context.Context, string, string, int64, []byte) error {
	return errors.New("configlog: kafka did not acknowledge the write")
}

func (refusingLog) Delete(context.Context, string, string, int64) error {
	return errors.New("configlog: kafka did not acknowledge the write")
}

func statusFixture(id string) *subscription.Status {
	updated := mustTime("2030-01-02T03:04:05Z")
	oldest := mustTime("2030-01-02T03:04:00Z")
	return &subscription.Status{SubscriptionID: id, Partitions: []subscription.PartitionStatus{
		{Topic: "orders", Partition: 0, Committed: 5, LogEnd: 9, Lag: 4, Watermark: 5, Pending: 3, InFlight: 2, InFlightKeys: 2,
			AckedRanges: [][2]int64{{7, 7}}, Owner: "node-a", OldestPending: &oldest, Updated: &updated},
		{Topic: "refunds", Partition: 0, Committed: -1, LogEnd: 0, Lag: 0, Watermark: -1, AckedRanges: [][2]int64{}},
	}}
}

func deadLetterFixture() subscription.DeadLetter {
	at := mustTime("2030-01-02T03:04:05Z")
	return subscription.DeadLetter{ID: "dlv_x", Topic: "orders", Partition: 1, Offset: 3, DeadLetterTopic: "orders.keyhook.dlq",
		DeadLetterOffset: 0, KeyBase64: "AAE=", Status: 0, Error: "connection refused", Attempts: 5,
		FirstAttempt: at, LastAttempt: at, Headers: map[string]string{"source": "test"}}
}

func mustTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// runNode heartbeats one node into e's registry until the returned stop
// is called, and waits for it to be listed.
func runNode(t *testing.T, e *env) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- e.nodes.Run(ctx, nodes.Info{ID: "node-a", Version: "test", Roles: []string{"api", "dispatcher"}},
			func() []nodes.Ownership {
				return []nodes.Ownership{{Subscription: "sub_x", Topic: "orders", Partition: 0}}
			})
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		list, err := e.nodes.List(ctx)
		if err == nil && len(list) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node not listed: %v %v", list, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return func() {
		cancel()
		<-done
	}
}
