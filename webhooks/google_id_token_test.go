package webhooks_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/go-jose/go-jose/v4"

	"github.com/keyhook/keyhook/webhooks"
)

const testServiceAccount = "keyhook@keyhook-test.iam.gserviceaccount.com"

// idIssuer stands in for Google's token endpoint: it takes a service
// account's signed assertion (checked with the account's public key) and
// mints an ID token for the assertion's target_audience, signed with its
// own key, published as a JWKS.
type idIssuer struct {
	*httptest.Server
	saKey, key *rsa.PrivateKey
	signer     jose.Signer
	lifetime   time.Duration
	minted     chan int
	mu         sync.Mutex
	n          int
}

func newIDIssuer(t *testing.T, lifetime time.Duration) *idIssuer {
	t.Helper()
	is := &idIssuer{lifetime: lifetime, minted: make(chan int, 100)}
	var err error
	if is.saKey, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		t.Fatal(err)
	}
	if is.key, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		t.Fatal(err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: is.key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "issuer-1"))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
			{Key: &is.key.PublicKey, KeyID: "issuer-1", Algorithm: "RS256", Use: "sig"}}})
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		assertion, err := jose.ParseSigned(r.PostFormValue("assertion"), []jose.SignatureAlgorithm{jose.RS256})
		if err != nil || r.PostFormValue("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
			http.Error(w, `{"error":"invalid_grant"}`, http.StatusBadRequest)
			return
		}
		payload, err := assertion.Verify(&is.saKey.PublicKey)
		var claims struct {
			Iss            string `json:"iss"`
			TargetAudience string `json:"target_audience"`
		}
		if err != nil || json.Unmarshal(payload, &claims) != nil || claims.Iss != testServiceAccount || claims.TargetAudience == "" {
			http.Error(w, `{"error":"invalid_grant"}`, http.StatusBadRequest)
			return
		}
		compact, err := is.mint(claims.TargetAudience)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"id_token": compact})
	})
	// The metadata server's identity path, as GCE_METADATA_HOST points
	// Google's metadata client at it: the token is the answer's whole body.
	mux.HandleFunc("GET /computeMetadata/v1/instance/service-accounts/default/identity", func(w http.ResponseWriter, r *http.Request) {
		aud := r.URL.Query().Get("audience")
		if r.Header.Get("Metadata-Flavor") != "Google" || aud == "" || r.URL.Query().Get("format") != "full" {
			http.Error(w, "bad metadata request", http.StatusBadRequest)
			return
		}
		compact, err := is.mint(aud)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, compact)
	})
	is.signer = signer
	is.Server = httptest.NewServer(mux)
	t.Cleanup(is.Close)
	return is
}

// mint signs the next ID token for audience and announces its number on
// minted.
func (is *idIssuer) mint(audience string) (string, error) {
	is.mu.Lock()
	is.n++
	n := is.n
	is.mu.Unlock()
	now := time.Now()
	tok, _ := json.Marshal(map[string]any{"iss": is.URL, "aud": audience, "sub": "1001",
		"email": testServiceAccount, "iat": now.Unix(), "exp": now.Add(is.lifetime).Unix(), "jti": fmt.Sprint(n)})
	jws, err := is.signer.Sign(tok)
	if err != nil {
		return "", err
	}
	compact, err := jws.CompactSerialize()
	if err != nil {
		return "", err
	}
	is.minted <- n
	return compact, nil
}

// credentialsJSON is a service account key whose token_uri is the issuer.
func (is *idIssuer) credentialsJSON(t *testing.T) string {
	der, err := x509.MarshalPKCS8PrivateKey(is.saKey)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]string{
		"type": "service_account", "project_id": "keyhook-test", "private_key_id": "sa-1",
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": testServiceAccount, "client_id": "1001", "token_uri": is.URL + "/token",
	})
	return string(b)
}

// oidcEndpoint verifies every request's ID token with go-oidc against the
// issuer's JWKS, for audience, and records the token ids (jti) it accepted.
func oidcEndpoint(t *testing.T, is *idIssuer, audience func() string) (*httptest.Server, func() []string) {
	var mu sync.Mutex
	var seen []string
	verifier := oidc.NewVerifier(is.URL, oidc.NewRemoteKeySet(context.Background(), is.URL+"/jwks"), &oidc.Config{SkipClientIDCheck: true})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		tok, err := verifier.Verify(r.Context(), raw)
		if !ok || err != nil {
			http.Error(w, fmt.Sprintf("invalid token: %v", err), http.StatusUnauthorized)
			return
		}
		if len(tok.Audience) != 1 || tok.Audience[0] != audience() {
			http.Error(w, fmt.Sprintf("audience %v", tok.Audience), http.StatusUnauthorized)
			return
		}
		var claims struct {
			JTI string `json:"jti"`
		}
		_ = tok.Claims(&claims)
		mu.Lock()
		seen = append(seen, claims.JTI)
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

func TestGoogleIDTokenVerifiesWithGoOIDCAndIsReusedUntilNearExpiry(t *testing.T) {
	is := newIDIssuer(t, time.Hour)
	var ep *httptest.Server
	ep, seen := oidcEndpoint(t, is, func() string { return ep.URL + "/hook" })
	c := newClient(t, webhooks.ClientConfig{})
	auth := &webhooks.Auth{GoogleIDToken: &webhooks.GoogleIDToken{Audience: ep.URL + "/hook", CredentialsJSON: is.credentialsJSON(t)}}
	for i := range 5 {
		a := c.Send(context.Background(), &webhooks.Request{URL: ep.URL + "/hook", Body: []byte("{}"), Auth: auth}, 1)
		if a.Err != nil || a.Status != http.StatusOK {
			t.Fatalf("delivery %d: status %d, err %v, body %s", i, a.Status, a.Err, a.Body)
		}
	}
	if got := strings.Join(seen(), ","); got != "1,1,1,1,1" {
		t.Errorf("token ids accepted = %s, want one token for five deliveries", got)
	}
}

func TestGoogleIDTokenIsRefreshedBeforeItExpires(t *testing.T) {
	// A five-second token is already within the refresh window.
	is := newIDIssuer(t, 5*time.Second)
	var ep *httptest.Server
	ep, seen := oidcEndpoint(t, is, func() string { return ep.URL })
	c := newClient(t, webhooks.ClientConfig{})
	auth := &webhooks.Auth{GoogleIDToken: &webhooks.GoogleIDToken{Audience: ep.URL, CredentialsJSON: is.credentialsJSON(t)}}
	send := func() {
		t.Helper()
		if a := c.Send(context.Background(), &webhooks.Request{URL: ep.URL, Body: []byte("{}"), Auth: auth}, 1); a.Status != http.StatusOK {
			t.Fatalf("status %d, err %v, body %s", a.Status, a.Err, a.Body)
		}
	}
	send()
	send() // still valid, but replaced (now or in the background)
	for n := range is.minted {
		if n >= 2 {
			break
		}
	}
	send()
	got := seen()
	if got[2] == got[0] {
		t.Errorf("token ids accepted = %v: the token near its expiry was not replaced", got)
	}
}

func TestGoogleIDTokenKeyIsHeldToTheAddressPolicyAndNeverShown(t *testing.T) {
	is := newIDIssuer(t, time.Hour)
	ep := newEndpoint(t, statuses(http.StatusOK))
	key := strings.Replace(is.credentialsJSON(t), is.URL, "http://169.254.169.254", 1)
	c := newStrictClient(t, webhooks.ClientConfig{Policy: webhooks.ExemptForTest(webhooks.AddressPolicy{}, netip.MustParseAddr("127.0.0.1"))})
	auth := &webhooks.Auth{GoogleIDToken: &webhooks.GoogleIDToken{Audience: ep.URL, CredentialsJSON: key}}
	a := c.Send(context.Background(), &webhooks.Request{URL: ep.URL, Body: []byte("{}"), Auth: auth}, 1)
	if a.Err == nil || !strings.Contains(a.Err.Error(), "refusing to connect to 169.254.169.254") {
		t.Errorf("err = %v, want the token_uri's address refused", a.Err)
	}
	if len(ep.requests()) != 0 {
		t.Errorf("the endpoint was called without a token")
	}
	shown := fmt.Sprintf("%v %+v %#v", a.Err, auth, *auth)
	if strings.Contains(shown, "PRIVATE KEY") || strings.Contains(shown, "sa-1") {
		t.Errorf("the key shows: %s", shown)
	}
}

// sendWithNodeCredentials delivers to ep with a Google ID token from the
// node's own credentials (no key in the subscription) and returns the
// attempt's error, if any.
func sendWithNodeCredentials(t *testing.T, c *webhooks.Client, url string) error {
	t.Helper()
	auth := &webhooks.Auth{GoogleIDToken: &webhooks.GoogleIDToken{Audience: url}}
	a := c.Send(context.Background(), &webhooks.Request{URL: url, Body: []byte("{}"), Auth: auth}, 1)
	if a.Err != nil {
		return a.Err
	}
	if a.Status != http.StatusOK {
		return fmt.Errorf("status %d, body %s", a.Status, a.Body)
	}
	return nil
}

func TestGoogleIDTokenFromTheMetadataServerVerifiesAndIsReused(t *testing.T) {
	is := newIDIssuer(t, time.Hour)
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", "")
	t.Setenv("GCE_METADATA_HOST", strings.TrimPrefix(is.URL, "http://"))
	var ep *httptest.Server
	ep, seen := oidcEndpoint(t, is, func() string { return ep.URL })
	// The strict policy refuses loopback for endpoints and token_uris: the
	// metadata server is reached all the same, as the node's own.
	c := newStrictClient(t, webhooks.ClientConfig{Policy: webhooks.ExemptForTest(webhooks.AddressPolicy{}, netip.MustParseAddr("127.0.0.1"))})
	for i := range 3 {
		if err := sendWithNodeCredentials(t, c, ep.URL); err != nil {
			t.Fatalf("delivery %d: %v", i, err)
		}
	}
	if got := strings.Join(seen(), ","); got != "1,1,1" {
		t.Errorf("token ids accepted = %s, want one metadata token for three deliveries", got)
	}
}

func TestGoogleIDTokenFromGoogleApplicationCredentialsKey(t *testing.T) {
	is := newIDIssuer(t, time.Hour)
	file := filepath.Join(t.TempDir(), "key.json")
	if err := os.WriteFile(file, []byte(is.credentialsJSON(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", file)
	t.Setenv("GCE_METADATA_HOST", "127.0.0.1:1") // never asked
	var ep *httptest.Server
	ep, seen := oidcEndpoint(t, is, func() string { return ep.URL + "/run" })
	c := newClient(t, webhooks.ClientConfig{})
	if err := sendWithNodeCredentials(t, c, ep.URL+"/run"); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(seen(), ","); got != "1" {
		t.Errorf("token ids accepted = %s, want the token the key's token_uri minted", got)
	}
}

func TestGoogleIDTokenRefusesNodeCredentialsThatAreNoServiceAccountKey(t *testing.T) {
	file := filepath.Join(t.TempDir(), "external.json")
	if err := os.WriteFile(file, []byte(`{"type":"external_account","audience":"//iam.googleapis.com/x"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", file)
	ep := newEndpoint(t, statuses(http.StatusOK))
	c := newClient(t, webhooks.ClientConfig{})
	err := sendWithNodeCredentials(t, c, ep.URL)
	if err == nil || !strings.Contains(err.Error(), `is not a service account key (type "external_account")`) {
		t.Errorf("err = %v, want the credentials file's type refused by name", err)
	}
	if len(ep.requests()) != 0 {
		t.Errorf("the endpoint was called without a token")
	}
}
