package auth

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/redis/go-redis/v9"
)

var tokenPattern = regexp.MustCompile(`^kh_[A-Za-z0-9_-]{43}$`)

func TestCreateStoresOnlyAHashAndAuthenticates(t *testing.T) {
	ctx := context.Background()
	rdb := testutil.StartRedis(t).Client()
	store := newStore(t, rdb)
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	store.now = func() time.Time { return now }

	secret, tok, err := store.Create(ctx, "ci", []Scope{ScopeWrite, ScopeRead, ScopeRead})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if !tokenPattern.MatchString(secret) {
		t.Errorf("token %q does not match %s", secret, tokenPattern)
	}
	want := Token{Name: "ci", Scopes: []Scope{ScopeRead, ScopeWrite}, CreatedAt: now, Version: now.UnixMilli()}
	if diff := cmp.Diff(want, tok); diff != "" {
		t.Errorf("record (-want +got):\n%s", diff)
	}
	// Nothing stored contains the token.
	keys, _ := rdb.Keys(ctx, "*").Result()
	for _, k := range keys {
		dump, _ := rdb.Dump(ctx, k).Result()
		if strings.Contains(k, secret) || strings.Contains(dump, secret) || strings.Contains(dump, secret[3:]) {
			t.Errorf("key %s holds the token", k)
		}
	}

	got, err := store.Authenticate(ctx, secret)
	if err != nil {
		t.Fatalf("Authenticate: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Authenticate (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"", secret + "x", secret[:len(secret)-1], strings.ToUpper(secret), strings.Repeat("a", MaxSecretLength+1)} {
		if _, err := store.Authenticate(ctx, bad); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("Authenticate(%.10q...): err = %v, want ErrInvalidToken", bad, err)
		}
	}

	if _, _, err := store.Create(ctx, "ci", []Scope{ScopeRead}); !errors.Is(err, ErrNameTaken) {
		t.Errorf("second Create of the name: err = %v, want ErrNameTaken", err)
	}
	for _, tt := range []struct {
		name   string
		scopes []Scope
	}{{"", []Scope{ScopeRead}}, {"has space", []Scope{ScopeRead}}, {strings.Repeat("n", MaxNameLength+1), []Scope{ScopeRead}}, {"ok", nil}, {"ok", []Scope{"root"}}} {
		if _, _, err := store.Create(ctx, tt.name, tt.scopes); err == nil {
			t.Errorf("Create(%q, %v) accepted", tt.name, tt.scopes)
		}
	}
}

func TestAdminImpliesEveryScope(t *testing.T) {
	for _, tt := range []struct {
		scopes []Scope
		read   bool
		write  bool
		admin  bool
	}{
		{[]Scope{ScopeRead}, true, false, false},
		{[]Scope{ScopeWrite}, false, true, false},
		{[]Scope{ScopeRead, ScopeWrite}, true, true, false},
		{[]Scope{ScopeAdmin}, true, true, true},
	} {
		tok := Token{Scopes: tt.scopes}
		if tok.Allows(ScopeRead) != tt.read || tok.Allows(ScopeWrite) != tt.write || tok.Allows(ScopeAdmin) != tt.admin {
			t.Errorf("%v allows read %v write %v admin %v", tt.scopes, tok.Allows(ScopeRead), tok.Allows(ScopeWrite), tok.Allows(ScopeAdmin))
		}
	}
}

func TestListShowsRecordsAndLastUseAndRevokeStopsAToken(t *testing.T) {
	ctx := context.Background()
	store := newStore(t, testutil.StartRedis(t).Client())
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	store.now = func() time.Time { return now }
	a, _, _ := store.Create(ctx, "b-reader", []Scope{ScopeRead})
	if _, _, err := store.Create(ctx, "a-admin", []Scope{ScopeAdmin}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Authenticate(ctx, a); err != nil {
		t.Fatal(err)
	}
	list, err := store.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []Token{
		{Name: "a-admin", Scopes: []Scope{ScopeAdmin}, CreatedAt: now, Version: now.UnixMilli()},
		{Name: "b-reader", Scopes: []Scope{ScopeRead}, CreatedAt: now, LastUsed: &now, Version: now.UnixMilli()},
	}
	if diff := cmp.Diff(want, list); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}

	// A later use within the resolution is not written again.
	later := now.Add(LastUsedResolution / 2)
	store.now = func() time.Time { return later }
	_, _ = store.Authenticate(ctx, a)
	if list, _ := store.List(ctx); !list[1].LastUsed.Equal(now) {
		t.Errorf("last used %v, want %v (within the resolution)", list[1].LastUsed, now)
	}

	if err := store.Revoke(ctx, "b-reader"); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	if _, err := store.Authenticate(ctx, a); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("revoked token authenticates: %v", err)
	}
	if err := store.Revoke(ctx, "b-reader"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Revoke again: err = %v, want ErrNotFound", err)
	}
	if list, _ := store.List(ctx); len(list) != 1 {
		t.Errorf("List after Revoke has %d tokens, want 1", len(list))
	}
}

func TestEnsureIsIdempotentAndRotates(t *testing.T) {
	ctx := context.Background()
	store := newStore(t, testutil.StartRedis(t).Client())
	first := Generate()
	for i, wantCreated := range []bool{true, false, false} {
		created, err := store.Ensure(ctx, "bootstrap", first, []Scope{ScopeAdmin})
		if err != nil || created != wantCreated {
			t.Fatalf("Ensure #%d = %v, %v; want %v", i, created, err, wantCreated)
		}
	}
	tok, err := store.Authenticate(ctx, first)
	if err != nil || !tok.Allows(ScopeAdmin) || tok.Name != "bootstrap" {
		t.Fatalf("bootstrap token = %+v, %v", tok, err)
	}

	second := Generate()
	if created, err := store.Ensure(ctx, "bootstrap", second, []Scope{ScopeAdmin}); err != nil || !created {
		t.Fatalf("Ensure with a new secret = %v, %v", created, err)
	}
	if _, err := store.Authenticate(ctx, first); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("the replaced bootstrap token still authenticates: %v", err)
	}
	if _, err := store.Authenticate(ctx, second); err != nil {
		t.Errorf("the new bootstrap token: %v", err)
	}
	if _, err := store.Ensure(ctx, "other", second, []Scope{ScopeAdmin}); err == nil {
		t.Error("Ensure stored one secret under two names")
	}
	for _, bad := range []string{"short", strings.Repeat("a", 40) + " b", strings.Repeat("é", 20)} {
		_, err := store.Ensure(ctx, "x", bad, []Scope{ScopeAdmin})
		if err == nil || strings.Contains(err.Error(), bad) {
			t.Errorf("Ensure(%q): err = %v, want a refusal that does not repeat the secret", bad, err)
		}
	}
}

func TestParseScopes(t *testing.T) {
	got, err := ParseScopes(" subscriptions:write , subscriptions:read,subscriptions:read")
	if err != nil || !cmp.Equal(got, []Scope{ScopeRead, ScopeWrite}) {
		t.Errorf("ParseScopes = %v, %v", got, err)
	}
	for _, bad := range []string{"", " , ", "read", "admin,root"} {
		if _, err := ParseScopes(bad); err == nil {
			t.Errorf("ParseScopes(%q) accepted", bad)
		}
	}
}

// newStore returns a Store over rdb with the default Config.
func newStore(t *testing.T, rdb redis.UniversalClient) *Store {
	t.Helper()
	s, err := New(rdb, Config{})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func TestNewRefusesANilClientAndABadPrefix(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { _ = rdb.Close() })
	if _, err := New(nil, Config{}); err == nil {
		t.Errorf("New(nil) succeeded; want an error")
	}
	if _, err := New(rdb, Config{Prefix: "kh{x}"}); err == nil || !strings.Contains(err.Error(), "Prefix") {
		t.Errorf("New with a brace in Prefix = %v; want an error naming Prefix", err)
	}
}
