package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keyhook/keyhook/subscription"
)

// secretA is a valid signing secret in its text form.
const secretA = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func decodeSub(t *testing.T, r response, want int) subscription.Subscription {
	t.Helper()
	var s subscription.Subscription
	if r.status != want || json.Unmarshal(r.body, &s) != nil {
		t.Fatalf("answer %d (want %d): %s", r.status, want, r.body)
	}
	return s
}

func TestSecretsShowOnlyInTheAnswerThatMadeThem(t *testing.T) {
	e := newEnv(t)
	body := `{"name":"n","topics":["t"],"endpoint":{"url":"https://h.example/","auth":{"bearer_token":"tok-1","headers":{"X-Api-Key":"key-1"}}}}`
	created := decodeSub(t, e.do(t, http.MethodPost, "/v1/subscriptions", body), 201)
	first := created.Signing.Secrets[0]
	if !strings.HasPrefix(first.Secret, "whsec_") || !strings.HasPrefix(first.ID, "sec_") || created.Endpoint.Auth.BearerToken != redacted {
		t.Fatalf("created: signing %+v auth %+v", created.Signing, created.Endpoint.Auth)
	}
	id := "/v1/subscriptions/" + created.ID
	got := decodeSub(t, e.do(t, http.MethodGet, id, ""), 200)
	if got.Signing.Secrets[0].Secret != "" || got.Endpoint.Auth.Headers["X-Api-Key"] != redacted {
		t.Errorf("GET shows secrets: %+v %+v", got.Signing, got.Endpoint.Auth)
	}

	// Read, edit, PUT back: the redacted values and the secret listed by
	// id keep what is stored; nothing new is shown.
	put := map[string]any{
		"name": "renamed", "topics": got.Topics,
		"endpoint": map[string]any{"url": got.Endpoint.URL, "auth": got.Endpoint.Auth},
		"signing":  map[string]any{"secrets": []map[string]string{{"id": first.ID}}},
	}
	b, _ := json.Marshal(put)
	replaced := decodeSub(t, e.do(t, http.MethodPut, id, string(b)), 200)
	stored, _ := e.store.Get(context.Background(), created.ID)
	if diff := cmp.Diff([]subscription.SigningSecret{first}, stored.Signing.Secrets); diff != "" {
		t.Errorf("stored secrets after PUT (-want +got):\n%s", diff)
	}
	if stored.Endpoint.Auth.BearerToken != "tok-1" || stored.Endpoint.Auth.Headers["X-Api-Key"] != "key-1" {
		t.Errorf("PUT with redacted credentials lost them: %+v", stored.Endpoint.Auth)
	}
	if replaced.Signing.Secrets[0].Secret != "" {
		t.Errorf("PUT answer shows a secret it did not make")
	}

	// Rotation by PATCH: a new value is added, and shown once; the old
	// one, listed by id, keeps signing until its expiry.
	patch := `{"signing":{"secrets":[{"secret":"` + secretA + `"},{"id":"` + first.ID + `","expires_at":"2031-01-01T00:00:00Z"}]}}`
	rotated := decodeSub(t, e.do(t, http.MethodPatch, id, patch), 200)
	if len(rotated.Signing.Secrets) != 2 || rotated.Signing.Secrets[0].Secret != secretA || rotated.Signing.Secrets[1].Secret != "" ||
		rotated.Signing.Secrets[0].Hint != secretA[:10] || rotated.Signing.Secrets[1].ExpiresAt == nil {
		t.Errorf("rotated signing = %+v", rotated.Signing)
	}
	stored, _ = e.store.Get(context.Background(), created.ID)
	if stored.Signing.Secrets[1].Secret != first.Secret {
		t.Errorf("the old secret lost its value")
	}

	// PUT without signing keeps it; null in a PATCH starts afresh with a
	// new secret, shown once.
	again := decodeSub(t, e.do(t, http.MethodPut, id, `{"name":"n","topics":["t"],"endpoint":{"url":"https://h.example/"}}`), 200)
	if len(again.Signing.Secrets) != 2 {
		t.Errorf("PUT without signing changed it: %+v", again.Signing)
	}
	fresh := decodeSub(t, e.do(t, http.MethodPatch, id, `{"signing":null}`), 200)
	if len(fresh.Signing.Secrets) != 1 || !strings.HasPrefix(fresh.Signing.Secrets[0].Secret, "whsec_") || fresh.Signing.Secrets[0].ID == first.ID {
		t.Errorf("signing reset = %+v, want one new secret, shown", fresh.Signing)
	}
	off := decodeSub(t, e.do(t, http.MethodPatch, id, `{"signing":{"disabled":true,"secrets":null}}`), 200)
	if !off.Signing.Disabled || len(off.Signing.Secrets) != 0 {
		t.Errorf("signing off = %+v", off.Signing)
	}

	// An unknown id without a value is refused.
	p := wantProblem(t, e.do(t, http.MethodPatch, id, `{"signing":{"secrets":[{"id":"sec_nope"}]}}`), 400, slugValidation)
	if diff := cmp.Diff([]string{"signing.secrets[0].secret"}, fields(p)); diff != "" {
		t.Errorf("fields (-want +got):\n%s", diff)
	}
}

func TestRedactedIsWhatTheSubscriptionPackageShows(t *testing.T) {
	s := &subscription.Subscription{Endpoint: subscription.Endpoint{Auth: &subscription.EndpointAuth{BearerToken: "x"}}}
	if got := s.Redacted().Endpoint.Auth.BearerToken; got != redacted {
		t.Errorf("subscription.Redacted shows %q, api keeps values sent back as %q", got, redacted)
	}
}

// Rotation makes a new server-generated secret, shows it once, keeps the
// previous one signing until the overlap ends, and stores both.
func TestRotateShowsTheNewSecretOnceAndKeepsTheOldOneForTheOverlap(t *testing.T) {
	e := newEnv(t)
	created := decodeSub(t, e.do(t, http.MethodPost, "/v1/subscriptions", validBody), 201)
	old := created.Signing.Secrets[0]
	id := "/v1/subscriptions/" + created.ID
	rotated := decodeSub(t, e.do(t, http.MethodPost, id+"/signing/rotate", `{"overlap_seconds":3600}`), 200)
	if len(rotated.Signing.Secrets) != 2 {
		t.Fatalf("after rotation: %d secrets, want 2: %+v", len(rotated.Signing.Secrets), rotated.Signing)
	}
	newer, prev := rotated.Signing.Secrets[0], rotated.Signing.Secrets[1]
	if !strings.HasPrefix(newer.Secret, "whsec_") || newer.ID == old.ID {
		t.Errorf("rotation answer does not show a new secret: %+v", newer)
	}
	if prev.ID != old.ID || prev.Secret != "" || prev.ExpiresAt == nil {
		t.Errorf("previous secret %+v: want the old id, no value shown, an expiry", prev)
	}
	if d := prev.ExpiresAt.Sub(newer.CreatedAt); d < 59*time.Minute || d > 61*time.Minute {
		t.Errorf("previous secret expires %v after the rotation, want 1h", d)
	}
	got := decodeSub(t, e.do(t, http.MethodGet, id, ""), 200)
	for _, s := range got.Signing.Secrets {
		if s.Secret != "" {
			t.Errorf("GET after rotation shows secret %s", s.ID)
		}
	}
	stored, _ := e.store.Get(context.Background(), created.ID)
	if stored.Signing.Secrets[0].Secret != newer.Secret || stored.Signing.Secrets[1].Secret != old.Secret {
		t.Errorf("stored secrets are not [new, old]")
	}
}
