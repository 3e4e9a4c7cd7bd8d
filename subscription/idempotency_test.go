package subscription

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/keyhook/keyhook/internal/testutil"
)

func idem(caller, key, fp string) Idempotency {
	return Idempotency{Caller: caller, Key: key, Fingerprint: fp}
}

// signedSub is newSub with a signing secret and an endpoint credential,
// the values a replay must never show.
func signedSub(t *testing.T) *Subscription {
	t.Helper()
	sub := newSub()
	sec, err := NewSigningSecret(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sub.Signing.Secrets = []SigningSecret{sec}
	sub.Endpoint.Auth = &EndpointAuth{BearerToken: "endpoint-credential"}
	return sub
}

func TestCreateIdempotentCreatesOnceAndReplaysTheFirst(t *testing.T) {
	ctx := context.Background()
	rdb := testutil.StartRedis(t).Client()
	store := newStore(t, rdb, Config{})

	first := newSub()
	replayed, err := store.CreateIdempotent(ctx, first, idem("ops", "key-1", "fp-a"))
	if err != nil || replayed {
		t.Fatalf("first CreateIdempotent = %v, %v", replayed, err)
	}
	// The subscription changes; a replay still answers it as created.
	if _, err := store.Update(ctx, first.ID, AnyVersion, func(s *Subscription) error { s.Name = "changed"; return nil }); err != nil {
		t.Fatal(err)
	}
	again := newSub()
	replayed, err = store.CreateIdempotent(ctx, again, idem("ops", "key-1", "fp-a"))
	if err != nil || !replayed {
		t.Fatalf("repeat CreateIdempotent = %v, %v", replayed, err)
	}
	if diff := cmp.Diff(first.Redacted(), again); diff != "" {
		t.Errorf("replay (-first +replay):\n%s", diff)
	}

	other := newSub()
	if _, err := store.CreateIdempotent(ctx, other, idem("ops", "key-1", "fp-b")); !errors.Is(err, ErrIdempotencyKeyReused) {
		t.Errorf("reused key: err = %v, want ErrIdempotencyKeyReused", err)
	}
	if other.ID != "" {
		t.Errorf("a refused create changed its argument: %+v", other)
	}
	bad := &Subscription{Name: "bad"}
	var verr *ValidationError
	if _, err := store.CreateIdempotent(ctx, bad, idem("ops", "key-2", "fp")); !errors.As(err, &verr) {
		t.Errorf("invalid: err = %v, want *ValidationError", err)
	}
	if n, _ := rdb.Exists(ctx, store.keys.Idempotency("ops", "key-2")).Result(); n != 0 {
		t.Error("an invalid create recorded its key")
	}
	if list, _ := store.List(ctx); len(list) != 1 {
		t.Errorf("%d subscriptions stored, want 1", len(list))
	}
}

func TestCreateIdempotentRefusesAMissingPart(t *testing.T) {
	store := newStore(t, testutil.StartRedis(t).Client(), Config{})
	for _, req := range []Idempotency{idem("", "k", "fp"), idem("ops", "", "fp"), idem("ops", "k", ""), idem("ops", "k", "a\nb")} {
		if _, err := store.CreateIdempotent(context.Background(), newSub(), req); err == nil {
			t.Errorf("CreateIdempotent(%+v) succeeded; want an error", req)
		}
	}
}

// Another caller sending the same key and body is another request: it
// creates its own subscription and never sees the first caller's answer.
func TestIdempotencyKeysAreScopedToTheCaller(t *testing.T) {
	ctx := context.Background()
	store := newStore(t, testutil.StartRedis(t).Client(), Config{})
	mine := signedSub(t)
	if _, err := store.CreateIdempotent(ctx, mine, idem("ops", "same-key", "fp")); err != nil {
		t.Fatal(err)
	}
	theirs := signedSub(t)
	replayed, err := store.CreateIdempotent(ctx, theirs, idem("intruder", "same-key", "fp"))
	if err != nil || replayed {
		t.Fatalf("another caller's CreateIdempotent = %v, %v; want a new create", replayed, err)
	}
	if theirs.ID == mine.ID || theirs.Signing.Secrets[0].Secret == mine.Signing.Secrets[0].Secret {
		t.Errorf("another caller got the first caller's subscription %s or its secret", mine.ID)
	}
	// Each caller's key still replays its own answer.
	for _, c := range []struct {
		caller string
		id     string
	}{{"ops", mine.ID}, {"intruder", theirs.ID}} {
		again := newSub()
		if replayed, err := store.CreateIdempotent(ctx, again, idem(c.caller, "same-key", "fp")); err != nil || !replayed || again.ID != c.id {
			t.Errorf("%s's repeat = %s, %v, %v; want a replay of %s", c.caller, again.ID, replayed, err, c.id)
		}
	}
}

// A replay answers the subscription without a secret: not the one made
// at creation, nor, after a rotation, the one rotated out.
func TestReplayNeverShowsASecret(t *testing.T) {
	ctx := context.Background()
	rdb := testutil.StartRedis(t).Client()
	store := newStore(t, rdb, Config{})
	first := signedSub(t)
	if _, err := store.CreateIdempotent(ctx, first, idem("ops", "k", "fp")); err != nil {
		t.Fatal(err)
	}
	created := first.Signing.Secrets[0]
	if created.Secret == "" {
		t.Fatal("the creating answer has no secret")
	}
	// Rotate: a new secret signs, the created one is retired.
	if _, err := store.Update(ctx, first.ID, AnyVersion, func(s *Subscription) error {
		sec, err := NewSigningSecret(time.Now())
		s.Signing.Secrets = []SigningSecret{sec}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	replay := newSub()
	if replayed, err := store.CreateIdempotent(ctx, replay, idem("ops", "k", "fp")); err != nil || !replayed {
		t.Fatalf("replay = %v, %v", replayed, err)
	}
	data, _ := json.Marshal(replay)
	for _, secret := range []string{created.Secret, "endpoint-credential"} {
		if strings.Contains(string(data), secret) {
			t.Errorf("the replay shows the secret %q: %s", secret, data)
		}
	}
	if len(replay.Signing.Secrets) != 1 || replay.Signing.Secrets[0].ID != created.ID || replay.Signing.Secrets[0].Hint != created.Hint {
		t.Errorf("replay secrets = %+v; want the created secret's id and hint, without its value", replay.Signing.Secrets)
	}
	// Nor is it kept where a replay could find it.
	rec, err := rdb.Get(ctx, store.keys.Idempotency("ops", "k")).Result()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(rec, created.Secret) || strings.Contains(rec, "endpoint-credential") {
		t.Errorf("the idempotency record holds a secret: %s", rec)
	}
}

func TestIdempotencyRecordsExpireAfterTheTTL(t *testing.T) {
	ctx := context.Background()
	rdb := testutil.StartRedis(t).Client()
	def := newStore(t, rdb, Config{})
	if _, err := def.CreateIdempotent(ctx, newSub(), idem("ops", "k", "fp")); err != nil {
		t.Fatal(err)
	}
	ttl, err := rdb.PTTL(ctx, def.keys.Idempotency("ops", "k")).Result()
	if err != nil || ttl <= 24*time.Hour-time.Minute || ttl > 24*time.Hour {
		t.Errorf("record TTL = %v, %v; want 24h", ttl, err)
	}

	short := newStore(t, rdb, Config{Prefix: "short", IdempotencyTTL: 50 * time.Millisecond})
	a := newSub()
	if _, err := short.CreateIdempotent(ctx, a, idem("ops", "k", "fp")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		b := newSub()
		replayed, err := short.CreateIdempotent(ctx, b, idem("ops", "k", "fp"))
		if err != nil {
			t.Fatal(err)
		}
		if !replayed {
			if b.ID == a.ID {
				t.Error("an expired key created the same id")
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the key never expired")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
