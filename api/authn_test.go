package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/keyhook/keyhook/auth"
)

// routes lists every route of a router built as newEnv builds it, as
// method and path template.
func routes(t *testing.T, h http.Handler) [][2]string {
	t.Helper()
	var out [][2]string
	err := chi.Walk(h.(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		out = append(out, [2]string{method, route})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestEveryV1RouteNeedsAValidTokenWithItsScope(t *testing.T) {
	e := newEnv(t)
	sub := e.create(t, validBody)
	h, err := NewRouter(Dependencies{Store: e.store, URLs: refusingChecker{}, Status: e.status, Seeker: e.seeker, Starts: e.starts,
		DeadLetters: e.dead, Tester: &WebhookTester{}, Nodes: e.nodes, Auth: e.tokens, Keys: e.keys}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	revoked, _, err := e.tokens.Create(t.Context(), "revoked", []auth.Scope{auth.ScopeRead})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.tokens.Revoke(t.Context(), "revoked"); err != nil {
		t.Fatal(err)
	}

	checked := 0
	for _, rt := range routes(t, h) {
		method, path := rt[0], rt[1]
		if !strings.HasPrefix(path, "/v1/") {
			continue
		}
		checked++
		path = strings.ReplaceAll(path, "{id}", sub.ID)
		// The scope a route needs: reading is GET, everything else writes.
		needs, lacks := e.reader, e.writer
		scope := "subscriptions:read"
		if method != http.MethodGet {
			needs, lacks = e.writer, e.reader
			scope = "subscriptions:write"
		}
		before := e.snapshot(t)
		for _, c := range []struct {
			name, header, slug, challenge string
			status                        int
		}{
			{"no header", "", slugUnauthorized, `Bearer realm="keyhook"`, 401},
			{"another scheme", "Basic YWRtaW46YWRtaW4=", slugUnauthorized, `Bearer realm="keyhook"`, 401},
			{"empty bearer", "Bearer ", slugUnauthorized, `Bearer realm="keyhook"`, 401},
			{"unknown token", "Bearer kh_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", slugUnauthorized, `Bearer realm="keyhook", error="invalid_token"`, 401},
			{"revoked token", "Bearer " + revoked, slugUnauthorized, `Bearer realm="keyhook", error="invalid_token"`, 401},
			{"insufficient scope", "Bearer " + lacks, slugInsufficientScope, `Bearer realm="keyhook", error="insufficient_scope", scope="` + scope + `"`, 403},
		} {
			r := req{method: method, path: path, header: map[string]string{"Content-Type": "application/json"}, body: `{"to":"earliest"}`}
			if c.header != "" {
				r.header["Authorization"] = c.header
			}
			resp := e.send(t, r)
			wantProblem(t, resp, c.status, c.slug)
			if got := resp.header.Get("WWW-Authenticate"); got != c.challenge {
				t.Errorf("%s %s, %s: WWW-Authenticate = %q, want %q", method, path, c.name, got, c.challenge)
			}
		}
		e.unchanged(t, before)
		// The right scope, and admin, get past authentication (whatever
		// the handler then makes of the request).
		for _, tok := range []string{needs, e.admin} {
			if method == http.MethodDelete {
				continue // keep the subscription for the other routes
			}
			resp := e.send(t, req{method: method, path: path, token: tok, header: map[string]string{"Content-Type": "application/json"}, body: `{"to":"earliest"}`})
			if resp.status == 401 || resp.status == 403 {
				t.Errorf("%s %s with a %s token = %d %s", method, path, scope, resp.status, resp.body)
			}
		}
	}
	if checked < 14 {
		t.Errorf("checked %d /v1 routes, want every one (14)", checked)
	}
	if strings.Contains(e.log.String(), "kh_") {
		t.Errorf("a token reached the log:\n%s", e.log.String())
	}
}
