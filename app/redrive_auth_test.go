package app_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/internal/testutil"
)

// TestRedriveMintsAGoogleIDTokenForTheDefaultAudience registers a Cloud
// Run style endpoint with a Google ID token and no audience, dead-letters
// a record and redrives it: the redrive carries a token minted for the
// endpoint URL without its query, as the first delivery did.
func TestRedriveMintsAGoogleIDTokenForTheDefaultAudience(t *testing.T) {
	const topic = "orders"
	brokers := testutil.Kfake(t, 1, topic)
	n := startNode(t, brokers)
	issuer, key := startIDTokenIssuer(t)
	sink := testutil.StartSink(t)
	audience := sink.URL + "/hooks/orders"
	var accept atomic.Bool
	var tokens atomic.Int64
	sink.Status = func(d *testutil.Delivery) int {
		if idTokenAudience(d.Header) != audience {
			return http.StatusUnauthorized
		}
		tokens.Add(1)
		if !accept.Load() {
			return http.StatusBadRequest
		}
		return http.StatusOK
	}
	var sub struct{ ID string }
	body := `{"name":"run","topics":["` + topic + `"],"endpoint":{"url":"` + audience + `?tenant=acme",
		"auth":{"google_id_token":{"credentials_json":` + jsonQuote(key) + `}}}}`
	if code := n.call(t, http.MethodPost, "/v1/subscriptions", body, &sub); code != http.StatusCreated {
		t.Fatalf("create subscription = %d", code)
	}
	produce(t, brokers, topic, &kgo.Record{Key: []byte("k"), Value: []byte("refused")})
	eventually(t, 20*time.Second, "a dead letter", func() bool { return n.deadLetters(t, sub.ID) == 1 })
	if tokens.Load() != 1 || issuer.Load() == 0 {
		t.Fatalf("first delivery: %d requests with a token for %s, %d tokens minted", tokens.Load(), audience, issuer.Load())
	}

	accept.Store(true)
	var res struct{ Redriven int }
	if code := n.call(t, http.MethodPost, "/v1/subscriptions/"+sub.ID+"/dead-letters/redrive", `{"all":true}`, &res); code != http.StatusOK || res.Redriven != 1 {
		t.Fatalf("redrive = %d %+v, want 200 and 1 redriven", code, res)
	}
	eventually(t, 15*time.Second, "the redrive delivered with a token for "+audience, func() bool { return len(succeeded(sink)) == 1 })
}

// startIDTokenIssuer stands in for Google's token endpoint: it mints an ID
// token for the target_audience of a service account's assertion. It
// returns the count of tokens minted and a service account key whose
// token_uri is the issuer. Signatures are not checked: the test is about
// the audience.
func startIDTokenIssuer(t *testing.T) (*atomic.Int64, string) {
	t.Helper()
	var minted atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var claims struct {
			TargetAudience string `json:"target_audience"`
		}
		if jwtClaims(r.PostFormValue("assertion"), &claims) != nil || claims.TargetAudience == "" {
			http.Error(w, `{"error":"invalid_grant"}`, http.StatusBadRequest)
			return
		}
		minted.Add(1)
		now := time.Now()
		payload, _ := json.Marshal(map[string]any{"aud": claims.TargetAudience, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()})
		tok := "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9." + base64.RawURLEncoding.EncodeToString(payload) + ".c2ln"
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"id_token": tok})
	}))
	t.Cleanup(srv.Close)
	pk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(pk)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := json.Marshal(map[string]string{
		"type": "service_account", "project_id": "keyhook-test", "private_key_id": "sa-1",
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": "keyhook@keyhook-test.iam.gserviceaccount.com", "token_uri": srv.URL + "/token",
	})
	return &minted, string(key)
}

// idTokenAudience returns the aud claim of a request's bearer token.
func idTokenAudience(h http.Header) string {
	var claims struct {
		Aud string `json:"aud"`
	}
	tok, ok := strings.CutPrefix(h.Get("Authorization"), "Bearer ")
	if !ok || jwtClaims(tok, &claims) != nil {
		return ""
	}
	return claims.Aud
}

// jwtClaims decodes a JWT's payload into v, unverified.
func jwtClaims(tok string, v any) error {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return errMalformedJWT
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

var errMalformedJWT = errors.New("not a JWT")

func jsonQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
