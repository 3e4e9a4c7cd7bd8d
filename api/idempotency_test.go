package api

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// sendKeyed POSTs validBody with an Idempotency-Key, as token.
func sendKeyed(t *testing.T, e *env, token, key string) response {
	t.Helper()
	return e.send(t, req{method: http.MethodPost, path: "/v1/subscriptions", token: token,
		header: map[string]string{"Content-Type": "application/json", "Idempotency-Key": key}, body: validBody})
}

// Another token replaying a key and body gets a create of its own, never
// the first caller's subscription or secret.
func TestIdempotencyKeyOfAnotherTokenIsAnotherRequest(t *testing.T) {
	e := newEnv(t)
	first := decodeSub(t, sendKeyed(t, e, e.writer, "shared-key"), http.StatusCreated)
	other := sendKeyed(t, e, e.admin, "shared-key")
	if other.status != http.StatusCreated || other.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("another token's POST = %d replayed %q; want a new create", other.status, other.header.Get("Idempotent-Replayed"))
	}
	second := decodeSub(t, other, http.StatusCreated)
	if second.ID == first.ID {
		t.Errorf("another token got the first caller's subscription %s", first.ID)
	}
	if strings.Contains(string(other.body), first.Signing.Secrets[0].Secret) {
		t.Errorf("another token got the first caller's signing secret")
	}
	if n := len(mustList(t, e)); n != 2 {
		t.Errorf("%d subscriptions stored, want 2 (one per token)", n)
	}
	// The first caller's key still replays its own subscription.
	if again := decodeSub(t, sendKeyed(t, e, e.writer, "shared-key"), http.StatusCreated); again.ID != first.ID {
		t.Errorf("the first caller's replay answers %s; want %s", again.ID, first.ID)
	}
}

// A replay shows no signing secret: not the one shown at creation, and
// not, after a rotation, the one rotated out.
func TestReplayAfterRotationShowsNoSecret(t *testing.T) {
	e := newEnv(t)
	first := decodeSub(t, sendKeyed(t, e, e.writer, "k"), http.StatusCreated)
	created := first.Signing.Secrets[0].Secret
	if !strings.HasPrefix(created, "whsec_") {
		t.Fatalf("the creating answer shows secret %q; want a whsec_ value", created)
	}
	for _, step := range []string{"before rotation", "after rotation"} {
		if step == "after rotation" {
			decodeSub(t, e.do(t, http.MethodPost, "/v1/subscriptions/"+first.ID+"/signing/rotate", `{"overlap_seconds":3600}`), http.StatusOK)
		}
		again := sendKeyed(t, e, e.writer, "k")
		if again.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("%s: POST replayed %q; want a replay", step, again.header.Get("Idempotent-Replayed"))
		}
		replay := decodeSub(t, again, http.StatusCreated)
		if strings.Contains(string(again.body), `"secret"`) || strings.Contains(string(again.body), created) {
			t.Errorf("%s: the replay shows a secret: %s", step, again.body)
		}
		if replay.ID != first.ID || len(replay.Signing.Secrets) != 1 || replay.Signing.Secrets[0].ID != first.Signing.Secrets[0].ID {
			t.Errorf("%s: replay = %s with secrets %+v; want %s with the created secret's id", step, replay.ID, replay.Signing.Secrets, first.ID)
		}
	}
}

// Records expire after 24 hours, scoped to the token: one per token that
// used the key.
func TestIdempotencyRecordsExpireAfterADay(t *testing.T) {
	e := newEnv(t)
	sendKeyed(t, e, e.writer, "k")
	sendKeyed(t, e, e.admin, "k")
	ctx := context.Background()
	keys, err := e.rdb.Keys(ctx, "{keyhook:subscriptions}:idempotency:*").Result()
	if err != nil || len(keys) != 2 {
		t.Fatalf("idempotency records = %q, %v; want 2", keys, err)
	}
	for _, k := range keys {
		if ttl, err := e.rdb.PTTL(ctx, k).Result(); err != nil || ttl <= 24*time.Hour-time.Minute || ttl > 24*time.Hour {
			t.Errorf("record %s expires in %v (%v); want 24h", k, ttl, err)
		}
	}
}
