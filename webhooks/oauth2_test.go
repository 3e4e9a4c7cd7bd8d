package webhooks_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/keyhook/keyhook/webhooks"
)

const testClientSecret = "cs-0f6b1e-oauth2-client-secret"

// tokenServer is an OAuth2 token endpoint that counts the tokens it
// issues: tok-1, tok-2...
type tokenServer struct {
	*httptest.Server
	mu       sync.Mutex
	issued   int
	lifetime int // seconds
	scopes   []string
}

func newTokenServer(t *testing.T, lifetime int) *tokenServer {
	ts := &tokenServer{lifetime: lifetime}
	ts.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, secret, ok := r.BasicAuth()
		if !ok {
			_ = r.ParseForm()
			id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
		}
		if id != "keyhook" || secret != testClientSecret || r.PostFormValue("grant_type") != "client_credentials" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			// A hostile server echoes what it was sent.
			fmt.Fprintf(w, `{"error":"invalid_client","error_description":"bad secret %s"}`, secret)
			return
		}
		ts.mu.Lock()
		ts.issued++
		n := ts.issued
		ts.scopes = strings.Fields(r.PostFormValue("scope"))
		ts.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":"tok-%d","token_type":"Bearer","expires_in":%d}`, n, ts.lifetime)
	}))
	t.Cleanup(ts.Close)
	return ts
}

func (ts *tokenServer) count() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.issued
}

func oauth2Auth(tokenURL, secret string) *webhooks.Auth {
	return &webhooks.Auth{OAuth2: &webhooks.OAuth2ClientCredentials{TokenURL: tokenURL, ClientID: "keyhook",
		ClientSecret: secret, Scopes: []string{"webhooks.write", "orders"}}}
}

func TestOAuth2RequestsOneTokenPerExpiryNotPerDelivery(t *testing.T) {
	// 11 s lasts 1 s: a token is renewed 10 s before it expires.
	ts := newTokenServer(t, 11)
	ep := newEndpoint(t, statuses(http.StatusOK))
	c := newClient(t, webhooks.ClientConfig{})
	send := func(n int) {
		t.Helper()
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				// One Auth per request, as a redrive renders them: the
				// token is shared by credentials, not by pointer.
				req := &webhooks.Request{URL: ep.URL, Body: []byte("{}"), DeliveryID: fmt.Sprintf("dlv_%d", i),
					Auth: oauth2Auth(ts.URL+"/token", testClientSecret)}
				if a := c.Send(context.Background(), req, 1); a.Err != nil || a.Status != http.StatusOK {
					t.Errorf("Send: status %d, err %v", a.Status, a.Err)
				}
			})
		}
		wg.Wait()
	}
	send(20)
	if got := ts.count(); got != 1 {
		t.Fatalf("token requests for 20 deliveries = %d, want 1", got)
	}
	for _, r := range ep.requests() {
		if got := r.Header.Get("Authorization"); got != "Bearer tok-1" {
			t.Fatalf("Authorization = %q, want Bearer tok-1", got)
		}
	}
	if got := strings.Join(ts.scopes, " "); got != "webhooks.write orders" {
		t.Errorf("scopes requested = %q", got)
	}
	time.Sleep(1100 * time.Millisecond) // the token's own lifetime: oauth2 reads the wall clock
	send(5)
	if got := ts.count(); got != 2 {
		t.Fatalf("token requests after one expiry = %d, want 2", got)
	}
	if got := ep.requests()[len(ep.requests())-1].Header.Get("Authorization"); got != "Bearer tok-2" {
		t.Errorf("Authorization after the expiry = %q, want Bearer tok-2", got)
	}
}

func TestOAuth2TokenFailureIsRetryableAndNeverShowsTheSecret(t *testing.T) {
	ts := newTokenServer(t, 3600)
	ep := newEndpoint(t, statuses(http.StatusOK))
	c := newClient(t, webhooks.ClientConfig{})
	wrong := "cs-wrong-" + testClientSecret
	auth := oauth2Auth(ts.URL+"/token?tenant=t1", wrong)
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	a := c.Send(context.Background(), &webhooks.Request{URL: ep.URL, Body: []byte("{}"), Auth: auth}, 1)
	if a.Err == nil {
		t.Fatal("Send succeeded with a refused client secret")
	}
	if got := webhooks.Classify(a); got != webhooks.OutcomeRetry {
		t.Errorf("Classify = %v, want retry: the token endpoint may recover, or the credentials be fixed", got)
	}
	if len(ep.requests()) != 0 {
		t.Errorf("the endpoint was called without a token")
	}
	log.Info("attempt", "err", a.Err, "auth", auth)
	log.Info("attempt", "auth", *auth)
	shown := a.Err.Error() + logs.String() + fmt.Sprintf("%v %+v %#v %s", auth, auth, auth, auth)
	for _, secret := range []string{wrong, testClientSecret, "tenant=t1"} {
		if strings.Contains(shown, secret) {
			t.Errorf("%q shows up in errors or logs: %s", secret, shown)
		}
	}
	if !strings.Contains(a.Err.Error(), "401") || !strings.Contains(a.Err.Error(), "invalid_client") {
		t.Errorf("error %q does not say what the token endpoint answered", a.Err)
	}
}

func TestOAuth2TokenURLIsHeldToTheAddressPolicy(t *testing.T) {
	ep := newEndpoint(t, statuses(http.StatusOK))
	ip := netip.MustParseAddr("127.0.0.1")
	c := newStrictClient(t, webhooks.ClientConfig{Policy: webhooks.ExemptForTest(webhooks.AddressPolicy{}, ip)})
	for _, tokenURL := range []string{"http://169.254.169.254/token", "http://[::1]:9/token", "http://10.0.0.1/token"} {
		a := c.Send(context.Background(), &webhooks.Request{URL: ep.URL, Body: []byte("{}"),
			Auth: oauth2Auth(tokenURL, testClientSecret)}, 1)
		var fa *webhooks.ErrForbiddenAddress
		if !errors.As(a.Err, &fa) || webhooks.Classify(a) != webhooks.OutcomeFinal {
			t.Errorf("token URL %s: err = %v (%v), want the address refused, final as for an endpoint", tokenURL, a.Err, webhooks.Classify(a))
		}
	}
	if len(ep.requests()) != 0 {
		t.Errorf("the endpoint was called without a token")
	}
}

func TestOAuth2TokenEndpointRedirectIsNotFollowed(t *testing.T) {
	ts := newTokenServer(t, 3600)
	redirect := httptest.NewServer(http.RedirectHandler(ts.URL+"/token", http.StatusTemporaryRedirect))
	t.Cleanup(redirect.Close)
	ep := newEndpoint(t, statuses(http.StatusOK))
	c := newClient(t, webhooks.ClientConfig{})
	a := c.Send(context.Background(), &webhooks.Request{URL: ep.URL, Body: []byte("{}"),
		Auth: oauth2Auth(redirect.URL, testClientSecret)}, 1)
	if a.Err == nil || ts.count() != 0 {
		t.Errorf("err = %v, tokens issued = %d: a redirect must not carry the client secret elsewhere", a.Err, ts.count())
	}
}

func TestCredentialsNeverReachSpans(t *testing.T) {
	ts := newTokenServer(t, 3600)
	ep := newEndpoint(t, statuses(http.StatusUnauthorized))
	spans := tracetest.NewSpanRecorder()
	c := newClient(t, webhooks.ClientConfig{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))})
	wrong := "cs-wrong-" + testClientSecret
	for _, auth := range []*webhooks.Auth{
		oauth2Auth(ts.URL+"/token", testClientSecret), // a token, refused by the endpoint
		oauth2Auth(ts.URL+"/token", wrong),            // no token
	} {
		c.Send(context.Background(), &webhooks.Request{URL: ep.URL, Body: []byte("{}"), Auth: auth}, 1)
	}
	if len(spans.Ended()) != 2 {
		t.Fatalf("%d spans, want 2", len(spans.Ended()))
	}
	var shown strings.Builder
	for _, s := range spans.Ended() {
		fmt.Fprintf(&shown, "%s %v %v %v\n", s.Name(), s.Attributes(), s.Status(), s.Events())
	}
	for _, secret := range []string{testClientSecret, "tok-1"} {
		if strings.Contains(shown.String(), secret) {
			t.Errorf("%q shows in a span: %s", secret, shown.String())
		}
	}
}
