package api

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/keyhook/keyhook/auth"
	"github.com/keyhook/keyhook/console"
)

// The console is mounted on the API's own origin, without a token, and
// every answer under it carries the console's headers.
func TestConsoleIsServedWithItsHeaders(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		path, contentType string
		status            int
	}{
		{"/console/", "text/html; charset=utf-8", 200},
		{"/console", "text/html; charset=utf-8", 200}, // redirected to /console/
		{"/console/app.js", "text/javascript; charset=utf-8", 200},
		{"/console/api.js", "text/javascript; charset=utf-8", 200},
		{"/console/style.css", "text/css; charset=utf-8", 200},
		{"/console/missing.js", "text/plain; charset=utf-8", 404},
	} {
		resp := e.send(t, req{method: "GET", path: c.path})
		if resp.status != c.status {
			t.Errorf("GET %s = %d, want %d", c.path, resp.status, c.status)
		}
		want := map[string]string{
			"Content-Type":            c.contentType,
			"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
			"X-Frame-Options":         "DENY",
			"X-Content-Type-Options":  "nosniff",
			"Referrer-Policy":         "no-referrer",
		}
		for k, v := range want {
			if got := resp.header.Get(k); got != v {
				t.Errorf("GET %s: %s = %q, want %q", c.path, k, got, v)
			}
		}
		if resp.header.Get("Set-Cookie") != "" {
			t.Errorf("GET %s sets a cookie: %q", c.path, resp.header.Get("Set-Cookie"))
		}
	}
	// Changes are refused like any unknown method, as a problem.
	resp := e.send(t, req{method: "POST", path: "/console/", token: e.admin})
	if resp.status != http.StatusMethodNotAllowed || resp.header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("POST /console/ = %d %q, want 405 problem", resp.status, resp.header.Get("Content-Type"))
	}
	if !strings.Contains(console.ContentSecurityPolicy, "script-src 'self';") {
		t.Errorf("the policy lets scripts run from elsewhere: %s", console.ContentSecurityPolicy)
	}
}

// The console learns what a token may do from GET /v1/token: its name
// and scopes, never its value.
func TestConsoleLearnsTheScopesOfItsToken(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		token string
		want  auth.Scope
	}{
		{e.reader, auth.ScopeRead},
		{e.admin, auth.ScopeAdmin},
	} {
		resp := e.send(t, req{method: "GET", path: "/v1/token", token: c.token})
		var got tokenResponse
		if resp.status != 200 || json.Unmarshal(resp.body, &got) != nil {
			t.Fatalf("GET /v1/token = %d %s", resp.status, resp.body)
		}
		if got.Name == "" || !slices.Contains(got.Scopes, c.want) {
			t.Errorf("GET /v1/token = %s, want a name and the scope %s", resp.body, c.want)
		}
		if strings.Contains(string(resp.body), c.token) {
			t.Errorf("GET /v1/token shows the token's value: %s", resp.body)
		}
	}
	if resp := e.send(t, req{method: "GET", path: "/v1/token"}); resp.status != http.StatusUnauthorized {
		t.Errorf("GET /v1/token without a token = %d, want 401", resp.status)
	}
}
