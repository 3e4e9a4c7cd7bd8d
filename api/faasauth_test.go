package api

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// selfSignedPEM returns a client certificate and its key, PEM encoded.
func selfSignedPEM(t *testing.T) (certPEM, keyPEM string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "keyhook"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}))
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// The new credential kinds are secrets like the others: redacted in every
// answer, kept when sent back redacted, absent from the logs; user names
// (the OAuth2 client id) are shown only to tokens that may write.
func TestFaaSCredentialsAreRedactedKeptAndNeverShown(t *testing.T) {
	e := newEnv(t)
	certPEM, keyPEM := selfSignedPEM(t)
	const clientSecret = "cs-oauth2-secret-7f3a"
	saKey := `{"type":"service_account","client_email":"k@p.iam.gserviceaccount.com","private_key":"sa-private-key-9b1c","token_uri":"https://oauth2.googleapis.com/token"}`
	oauthSub := e.create(t, `{"name":"oauth","topics":["t"],"endpoint":{"url":"https://fn.example/hook","auth":{
		"oauth2_client_credentials":{"token_url":"https://idp.example/token","client_id":"cid-1","client_secret":"`+clientSecret+`","scopes":["a","b"]},
		"client_certificate":{"cert_pem":`+jsonString(certPEM)+`,"key_pem":`+jsonString(keyPEM)+`}}}}`)
	googleSub := e.create(t, `{"name":"run","topics":["t"],"endpoint":{"url":"https://svc-abc.a.run.app/","auth":{
		"google_id_token":{"credentials_json":`+jsonString(saKey)+`}}}}`)
	awsSub := e.create(t, `{"name":"lambda","topics":["t"],"endpoint":{"url":"https://abc.lambda-url.eu-west-1.on.aws/","auth":{
		"aws_sigv4":{"region":"eu-west-1","role_arn":"arn:aws:iam::123456789012:role/invoker"}}}}`)
	if a := awsSub.Endpoint.Auth.AWSSigV4; a == nil || a.Region != "eu-west-1" || a.RoleARN == "" {
		t.Errorf("aws_sigv4 answered as %+v: nothing in it is secret", a)
	}

	secrets := []string{clientSecret, "sa-private-key-9b1c", strings.Split(keyPEM, "\n")[1]}
	var answers []string
	for _, sub := range []string{oauthSub.ID, googleSub.ID, awsSub.ID} {
		for _, tok := range []string{e.admin, e.reader} {
			r := e.send(t, req{method: http.MethodGet, path: "/v1/subscriptions/" + sub, token: tok})
			answers = append(answers, string(r.body))
		}
	}
	list := e.do(t, http.MethodGet, "/v1/subscriptions", "")
	answers = append(answers, string(list.body))
	created, _ := json.Marshal([]any{oauthSub, googleSub, awsSub})
	answers = append(answers, string(created), e.log.String())
	for _, a := range answers {
		for _, s := range secrets {
			if strings.Contains(a, s) {
				t.Fatalf("a secret shows in an answer or the log: %s", a)
			}
		}
	}
	got := decodeSub(t, e.do(t, http.MethodGet, "/v1/subscriptions/"+oauthSub.ID, ""), 200)
	o, cc := got.Endpoint.Auth.OAuth2, got.Endpoint.Auth.ClientCertificate
	if o.ClientSecret != redacted || o.ClientID != "cid-1" || cc.KeyPEM != redacted || cc.CertPEM != certPEM {
		t.Errorf("admin sees oauth2 %+v, certificate key %q", o, cc.KeyPEM)
	}
	var asReader map[string]any
	_ = json.Unmarshal([]byte(answers[1]), &asReader)
	if id := asReader["endpoint"].(map[string]any)["auth"].(map[string]any)["oauth2_client_credentials"].(map[string]any)["client_id"]; id != redacted {
		t.Errorf("a read-only token sees client_id %v", id)
	}

	// Read, edit, PUT back: the redacted values keep what is stored.
	b, _ := json.Marshal(map[string]any{"name": "renamed", "topics": got.Topics,
		"endpoint": map[string]any{"url": got.Endpoint.URL, "auth": got.Endpoint.Auth}})
	decodeSub(t, e.do(t, http.MethodPut, "/v1/subscriptions/"+oauthSub.ID, string(b)), 200)
	stored, _ := e.store.Get(context.Background(), oauthSub.ID)
	if s := stored.Endpoint.Auth; s.OAuth2.ClientSecret != clientSecret || s.ClientCertificate.KeyPEM != keyPEM {
		t.Errorf("PUT with redacted credentials lost them")
	}
	patch := `{"endpoint":{"auth":{"google_id_token":{"audience":"https://custom","credentials_json":"[redacted]"}}}}`
	decodeSub(t, e.do(t, http.MethodPatch, "/v1/subscriptions/"+googleSub.ID, patch), 200)
	stored, _ = e.store.Get(context.Background(), googleSub.ID)
	if g := stored.Endpoint.Auth.GoogleIDToken; g.CredentialsJSON != saKey || g.Audience != "https://custom" {
		t.Errorf("PATCH with a redacted key: %q, audience %q", g.CredentialsJSON, g.Audience)
	}
}

func TestFaaSCredentialsProblemsNameTheirField(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name, auth, slug string
		fields           []string
	}{
		{"token URL refused by the address policy", `{"oauth2_client_credentials":{"token_url":"https://idp.blocked.test/token","client_id":"c","client_secret":"s"}}`,
			slugForbiddenEndpoint, []string{"endpoint.auth.oauth2_client_credentials.token_url"}},
		{"google token_uri refused by the address policy", `{"google_id_token":{"credentials_json":` +
			jsonString(`{"type":"service_account","client_email":"k@p","private_key":"x","token_uri":"https://t.blocked.test/token"}`) + `}}`,
			slugForbiddenEndpoint, []string{"endpoint.auth.google_id_token.credentials_json"}},
		{"redacted secret with nothing stored", `{"oauth2_client_credentials":{"token_url":"https://idp.example/token","client_id":"c","client_secret":"[redacted]"}}`,
			slugValidation, []string{"endpoint.auth.oauth2_client_credentials.client_secret"}},
		{"two sources of Authorization", `{"bearer_token":"t","aws_sigv4":{"region":"eu-west-1"}}`, slugValidation, []string{"endpoint.auth"}},
		{"unknown field", `{"aws_sigv4":{"region":"eu-west-1","secret_access_key":"x"}}`, slugValidation, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(t, http.MethodPost, "/v1/subscriptions", `{"name":"n","topics":["t"],"endpoint":{"url":"https://fn.example/","auth":`+tc.auth+`}}`)
			if tc.fields == nil {
				if r.status != http.StatusBadRequest {
					t.Errorf("status = %d, want 400: %s", r.status, r.body)
				}
				return
			}
			p := wantProblem(t, r, http.StatusBadRequest, tc.slug)
			if diff := cmp.Diff(tc.fields, fields(p)); diff != "" {
				t.Errorf("fields (-want +got):\n%s", diff)
			}
		})
	}
}

// A test delivery goes through the same pipeline: an OAuth2 endpoint gets
// a token, fetched once for several tests.
func TestTestDeliveryGetsAnOAuth2Token(t *testing.T) {
	e := newEnv(t)
	var issued atomic.Int32
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, secret, _ := r.BasicAuth(); id != "cid" || secret != "cs-1" {
			http.Error(w, `{"error":"invalid_client"}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":"at-%d","token_type":"Bearer","expires_in":3600}`, issued.Add(1))
	}))
	t.Cleanup(idp.Close)
	ep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer at-1" {
			http.Error(w, "no token", http.StatusUnauthorized)
		}
	}))
	t.Cleanup(ep.Close)
	sub := e.create(t, `{"name":"n","topics":["orders"],"endpoint":{"url":"`+ep.URL+`","auth":{
		"oauth2_client_credentials":{"token_url":"`+idp.URL+`/token","client_id":"cid","client_secret":"cs-1"}}}}`)
	for range 3 {
		if res := runTest(t, e, sub.ID); !res.Success {
			t.Fatalf("test delivery = %+v", res)
		}
	}
	if n := issued.Load(); n != 1 {
		t.Errorf("token requests for three test deliveries = %d, want 1", n)
	}
}

// Stored FaaS secrets follow the endpoint only within its origin, like a
// bearer token: a move elsewhere must send them again or say so.
func TestFaaSSecretsDoNotFollowTheEndpointToAnotherOrigin(t *testing.T) {
	e := newEnv(t)
	certPEM, keyPEM := selfSignedPEM(t)
	for name, auth := range map[string]string{
		"oauth2":             `{"oauth2_client_credentials":{"token_url":"https://idp.example/token","client_id":"c","client_secret":"cs-1"}}`,
		"client certificate": `{"client_certificate":{"cert_pem":` + jsonString(certPEM) + `,"key_pem":` + jsonString(keyPEM) + `}}`,
		"google key": `{"google_id_token":{"credentials_json":` +
			jsonString(`{"type":"service_account","client_email":"k@p","private_key":"x"}`) + `}}`,
	} {
		t.Run(name, func(t *testing.T) {
			sub := e.create(t, `{"name":"n","topics":["t"],"endpoint":{"url":"https://fn.example/","auth":`+auth+`}}`)
			p := wantProblem(t, e.do(t, http.MethodPatch, "/v1/subscriptions/"+sub.ID, `{"endpoint":{"url":"https://elsewhere.example/"}}`),
				http.StatusBadRequest, slugValidation)
			if diff := cmp.Diff([]string{"endpoint.auth"}, fields(p)); diff != "" {
				t.Errorf("fields (-want +got):\n%s", diff)
			}
			decodeSub(t, e.do(t, http.MethodPatch, "/v1/subscriptions/"+sub.ID,
				`{"endpoint":{"url":"https://elsewhere.example/","keep_credentials":true}}`), 200)
		})
	}
}
