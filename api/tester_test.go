package api

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// runTest posts a test delivery for sub and returns its result.
func runTest(t *testing.T, e *env, subID string) TestResult {
	t.Helper()
	r := e.send(t, req{method: http.MethodPost, path: "/v1/subscriptions/" + subID + "/test", token: e.writer})
	var res TestResult
	if r.status != http.StatusOK || json.Unmarshal(r.body, &res) != nil {
		t.Fatalf("POST /test = %d %s", r.status, r.body)
	}
	return res
}

// A test delivery is rendered like a real one: an endpoint that verifies
// Standard Webhooks signatures, or that requires the subscription's
// credentials, accepts it.
func TestTestDeliveryIsSignedAndAuthenticatedLikeARealOne(t *testing.T) {
	for _, tc := range []struct {
		name  string
		auth  string
		check func(r *http.Request, body []byte, secret string) string // "" when accepted
	}{
		{"signature verified", "", func(r *http.Request, body []byte, secret string) string {
			wh, err := standardwebhooks.NewWebhook(secret)
			if err == nil {
				err = wh.Verify(body, r.Header)
			}
			if err != nil {
				return "signature: " + err.Error()
			}
			return ""
		}},
		{"bearer token", `,"auth":{"bearer_token":"s3cret"}`, func(r *http.Request, _ []byte, _ string) string {
			if r.Header.Get("Authorization") != "Bearer s3cret" {
				return "no bearer token"
			}
			return ""
		}},
		{"basic", `,"auth":{"basic_username":"u","basic_password":"p"}`, func(r *http.Request, _ []byte, _ string) string {
			if u, p, ok := r.BasicAuth(); !ok || u != "u" || p != "p" {
				return "no basic credentials"
			}
			return ""
		}},
		{"static header", `,"auth":{"headers":{"X-Api-Key":"k1"}}`, func(r *http.Request, _ []byte, _ string) string {
			if r.Header.Get("X-Api-Key") != "k1" {
				return "no api key"
			}
			return ""
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			var secret string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				if why := tc.check(r, body, secret); why != "" {
					http.Error(w, why, http.StatusUnauthorized)
				}
			}))
			t.Cleanup(srv.Close)
			sub := e.create(t, `{"name":"n","topics":["orders"],"endpoint":{"url":"`+srv.URL+`"`+tc.auth+`}}`)
			if len(sub.Signing.Secrets) != 1 || sub.Signing.Secrets[0].Secret == "" {
				t.Fatalf("created subscription shows no signing secret: %+v", sub.Signing)
			}
			secret = sub.Signing.Secrets[0].Secret

			res := runTest(t, e, sub.ID)

			if !res.Success || res.Status != http.StatusOK {
				t.Errorf("test delivery = %+v, want 200 from an endpoint checking %s", res, tc.name)
			}
		})
	}
}

// A test delivery follows redirects as the subscription's
// endpoint.follow_redirects allows, and no further.
func TestTestDeliveryFollowsRedirectsAsTheSubscriptionSays(t *testing.T) {
	for _, tc := range []struct {
		name       string
		follow     string
		wantStatus int
	}{
		{"followed when on", `,"follow_redirects":1`, http.StatusOK},
		{"not followed when off", ``, http.StatusTemporaryRedirect},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Keyhook-Test") != "true" {
					http.Error(w, "not a test delivery", http.StatusBadRequest)
				}
			}))
			t.Cleanup(target.Close)
			srv := httptest.NewServer(http.RedirectHandler(target.URL+"/moved", http.StatusTemporaryRedirect))
			t.Cleanup(srv.Close)
			sub := e.create(t, `{"name":"n","topics":["orders"],"endpoint":{"url":"`+srv.URL+`"`+tc.follow+`}}`)

			res := runTest(t, e, sub.ID)

			if res.Status != tc.wantStatus {
				t.Errorf("test delivery status %d (error %q), want %d", res.Status, res.Error, tc.wantStatus)
			}
		})
	}
}
