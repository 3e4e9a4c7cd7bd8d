package webhooks_test

import (
	"context"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keyhook/keyhook/webhooks"
)

// redirectTo answers every request with a redirect of the given status.
func redirectTo(status int, location func() string) func(http.ResponseWriter, *http.Request, int) {
	return func(w http.ResponseWriter, r *http.Request, _ int) {
		http.Redirect(w, r, location(), status)
	}
}

func TestSendFollowsNoRedirectByDefault(t *testing.T) {
	for _, status := range []int{http.StatusTemporaryRedirect, http.StatusPermanentRedirect, http.StatusMovedPermanently} {
		target := newEndpoint(t, statuses(http.StatusOK))
		ep := newEndpoint(t, redirectTo(status, func() string { return target.URL }))
		c := newClient(t, webhooks.ClientConfig{})

		a := c.Send(context.Background(), &webhooks.Request{URL: ep.URL}, 1)

		if a.Status != status || a.Err != nil || webhooks.Classify(a) != webhooks.OutcomeFinal {
			t.Errorf("%d: Send = {status %d, err %v}, want the %d itself, final", status, a.Status, a.Err, status)
		}
		if n := len(target.requests()); n != 0 {
			t.Errorf("%d: target saw %d requests, want 0", status, n)
		}
	}
}

func TestSendFollows307And308WithBodyAndSignature(t *testing.T) {
	for _, status := range []int{http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		target := newEndpoint(t, statuses(http.StatusAccepted))
		ep := newEndpoint(t, redirectTo(status, func() string { return target.URL + "/moved" }))
		c := newClient(t, webhooks.ClientConfig{FollowRedirects: 1})
		secret, _ := webhooks.GenerateSecret()
		req := &webhooks.Request{
			URL:         ep.URL,
			Body:        []byte(`{"order":1}`),
			ContentType: "application/json",
			DeliveryID:  "dlv_redirected",
			Signer:      &webhooks.Signer{Secrets: []webhooks.Secret{mustSecret(t, secret)}},
		}

		a := c.Send(context.Background(), req, 1)

		if a.Status != http.StatusAccepted || webhooks.Classify(a) != webhooks.OutcomeSuccess {
			t.Fatalf("%d: Send = {status %d, err %v}, want 202 from the target", status, a.Status, a.Err)
		}
		seen := target.requests()
		if len(seen) != 1 {
			t.Fatalf("%d: target saw %d requests, want 1", status, len(seen))
		}
		got := []string{string(seen[0].Body), seen[0].Header.Get("Webhook-Id"), seen[0].Header.Get("Content-Type")}
		if diff := cmp.Diff([]string{`{"order":1}`, "dlv_redirected", "application/json"}, got); diff != "" {
			t.Errorf("%d: body, webhook-id, content type at the target (-want +got):\n%s", status, diff)
		}
		if seen[0].Header.Get("Webhook-Signature") == "" {
			t.Errorf("%d: the target got no signature", status)
		}
	}
}

func TestSendStopsAtTheRedirectLimitWithTheLastRedirectAsAnswer(t *testing.T) {
	target := newEndpoint(t, statuses(http.StatusOK))
	var hops []*endpoint
	next := func(i int) func() string {
		return func() string {
			if i+1 < len(hops) {
				return hops[i+1].URL
			}
			return target.URL
		}
	}
	for i := range 3 {
		hops = append(hops, newEndpoint(t, redirectTo(http.StatusTemporaryRedirect, next(i))))
	}
	c := newClient(t, webhooks.ClientConfig{FollowRedirects: 2})

	a := c.Send(context.Background(), &webhooks.Request{URL: hops[0].URL}, 1)

	if a.Status != http.StatusTemporaryRedirect || webhooks.Classify(a) != webhooks.OutcomeFinal {
		t.Fatalf("Send = {status %d, err %v}, want the third 307, final", a.Status, a.Err)
	}
	if n := len(target.requests()); n != 0 {
		t.Errorf("target behind a third redirect saw %d requests, want 0", n)
	}
}

func TestSendRefusesRedirectsItMustNotFollow(t *testing.T) {
	target := newEndpoint(t, statuses(http.StatusOK))
	tests := []struct {
		name     string
		status   int
		location string
		want     string
		wantURL  bool // also wraps ErrInvalidURL
	}{
		{"302 would become a GET", http.StatusFound, target.URL, "a 302 redirect to " + target.URL + " would resend the webhook as GET without its body", false},
		{"301 would become a GET", http.StatusMovedPermanently, target.URL, "a 301 redirect", false},
		{"303 would become a GET", http.StatusSeeOther, target.URL, "a 303 redirect", false},
		{"target with credentials", http.StatusTemporaryRedirect, strings.Replace(target.URL, "http://", "http://admin:hunter2@", 1), "endpoint.url must not contain user information", true},
		{"target the policy cannot resolve", http.StatusTemporaryRedirect, "http://no-such-host.example/hook?token=s3cret", `endpoint.url host "no-such-host.example" does not resolve`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ep := newEndpoint(t, redirectTo(tt.status, func() string { return tt.location }))
			c := newClient(t, webhooks.ClientConfig{
				FollowRedirects: 5,
				Policy:          webhooks.AddressPolicy{Resolver: offlineResolver()},
			})

			a := c.Send(context.Background(), &webhooks.Request{URL: ep.URL}, 1)

			if !errors.Is(a.Err, webhooks.ErrRedirectRefused) || webhooks.Classify(a) != webhooks.OutcomeFinal {
				t.Fatalf("Send = {status %d, err %v}, want a final ErrRedirectRefused", a.Status, a.Err)
			}
			if !strings.Contains(a.Err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", a.Err, tt.want)
			}
			if got := errors.Is(a.Err, webhooks.ErrInvalidURL); got != tt.wantURL {
				t.Errorf("errors.Is(err, ErrInvalidURL) = %v, want %v", got, tt.wantURL)
			}
			for _, secret := range []string{"hunter2", "s3cret"} {
				if strings.Contains(a.Err.Error(), secret) {
					t.Errorf("error %q leaks %q", a.Err, secret)
				}
			}
			if n := len(target.requests()); n != 0 {
				t.Errorf("target saw %d requests, want 0", n)
			}
		})
	}
}

func TestSendRefusesARedirectFromHTTPSToHTTP(t *testing.T) {
	plain := newEndpoint(t, statuses(http.StatusOK))
	secure := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, plain.URL, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(secure.Close)
	c := newClient(t, webhooks.ClientConfig{FollowRedirects: 3})
	pool := x509.NewCertPool()
	pool.AddCert(secure.Certificate())
	webhooks.TrustRootsForTest(c, pool)

	a := c.Send(context.Background(), &webhooks.Request{URL: secure.URL}, 1)

	if !errors.Is(a.Err, webhooks.ErrRedirectRefused) || !strings.Contains(a.Err.Error(), "from https to http://") {
		t.Fatalf("Send = {status %d, err %v}, want the downgrade refused", a.Status, a.Err)
	}
	if n, conns := len(plain.requests()), plain.conns.Load(); n != 0 || conns != 0 {
		t.Errorf("plain-text target saw %d requests on %d connections, want none", n, conns)
	}
}

func TestSendDropsCredentialsWhenARedirectLeavesTheOrigin(t *testing.T) {
	type creds struct{ APIKey, Authorization string }
	gotAt := func(e *endpoint) creds {
		seen := e.requests()
		if len(seen) != 1 {
			t.Fatalf("endpoint saw %d requests, want 1", len(seen))
		}
		return creds{seen[0].Header.Get("X-Api-Key"), seen[0].Header.Get("Authorization")}
	}
	auth := &webhooks.Auth{Headers: map[string]string{"X-Api-Key": "k"}, BearerToken: "t"}

	t.Run("same origin keeps them", func(t *testing.T) {
		var ep *endpoint
		ep = newEndpoint(t, func(w http.ResponseWriter, r *http.Request, n int) {
			if n == 1 {
				http.Redirect(w, r, ep.URL+"/second", http.StatusTemporaryRedirect)
			}
		})
		c := newClient(t, webhooks.ClientConfig{FollowRedirects: 1})

		a := c.Send(context.Background(), &webhooks.Request{URL: ep.URL + "/first", Auth: auth}, 1)

		if a.Status != http.StatusOK {
			t.Fatalf("Send: status %d, err %v", a.Status, a.Err)
		}
		second := ep.requests()[1]
		got := creds{second.Header.Get("X-Api-Key"), second.Header.Get("Authorization")}
		if diff := cmp.Diff(creds{"k", "Bearer t"}, got); diff != "" {
			t.Errorf("credentials after a same-origin redirect (-want +got):\n%s", diff)
		}
	})
	t.Run("another origin loses them", func(t *testing.T) {
		target := newEndpoint(t, statuses(http.StatusOK))
		ep := newEndpoint(t, redirectTo(http.StatusTemporaryRedirect, func() string { return target.URL }))
		c := newClient(t, webhooks.ClientConfig{FollowRedirects: 1})

		a := c.Send(context.Background(), &webhooks.Request{URL: ep.URL, Auth: auth}, 1)

		if a.Status != http.StatusOK {
			t.Fatalf("Send: status %d, err %v", a.Status, a.Err)
		}
		if diff := cmp.Diff(creds{}, gotAt(target)); diff != "" {
			t.Errorf("credentials at another origin (-want +got):\n%s", diff)
		}
	})
}

func TestNewClientRejectsNegativeFollowRedirects(t *testing.T) {
	_, err := webhooks.NewClient(webhooks.ClientConfig{FollowRedirects: -1})
	if err == nil || err.Error() != "webhooks: client follow redirects must not be negative" {
		t.Errorf("NewClient = %v, want the follow redirects error", err)
	}
}

func TestSendFollowsRedirectsAsTheRequestAllows(t *testing.T) {
	for _, tc := range []struct {
		name           string
		client, perReq int
		wantStatus     int
		wantAtTarget   int
	}{
		{"request allows one on a client that follows none", 0, 1, http.StatusOK, 1},
		{"request and client allow none", 0, 0, http.StatusTemporaryRedirect, 0},
		{"request leaves it to a client that follows one", 1, 0, http.StatusOK, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := newEndpoint(t, statuses(http.StatusOK))
			ep := newEndpoint(t, redirectTo(http.StatusTemporaryRedirect, func() string { return target.URL }))
			c := newClient(t, webhooks.ClientConfig{FollowRedirects: tc.client})

			a := c.Send(context.Background(), &webhooks.Request{URL: ep.URL, FollowRedirects: tc.perReq}, 1)

			if a.Status != tc.wantStatus {
				t.Errorf("Send: status %d (err %v), want %d", a.Status, a.Err, tc.wantStatus)
			}
			if n := len(target.requests()); n != tc.wantAtTarget {
				t.Errorf("target saw %d requests, want %d", n, tc.wantAtTarget)
			}
		})
	}
}

func TestSendRefusesANegativeRequestFollowRedirects(t *testing.T) {
	c := newClient(t, webhooks.ClientConfig{})
	a := c.Send(context.Background(), &webhooks.Request{URL: "http://example.com", FollowRedirects: -1}, 1)
	if !errors.Is(a.Err, webhooks.ErrInvalidRequest) {
		t.Errorf("Send: err %v, want ErrInvalidRequest", a.Err)
	}
}
