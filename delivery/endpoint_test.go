package delivery_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/keyhook/keyhook/delivery"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/webhooks"
)

// seen is what an endpoint received.
type seen struct {
	header http.Header
	body   []byte
}

// receiver is a real endpoint that records requests and answers with
// handle (200 when nil).
type receiver struct {
	*httptest.Server
	mu  sync.Mutex
	got []seen
}

func newReceiver(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, body []byte)) *receiver {
	t.Helper()
	rc := &receiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.got = append(rc.got, seen{r.Header.Clone(), body})
		rc.mu.Unlock()
		if handle != nil {
			handle(w, r, body)
		}
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) requests() []seen {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]seen(nil), rc.got...)
}

func newClient(t *testing.T) *webhooks.Client {
	t.Helper()
	c, err := webhooks.NewClient(webhooks.ClientConfig{Policy: webhooks.AddressPolicy{AllowPrivate: true}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func newSub(t *testing.T, url string) *subscription.Subscription {
	t.Helper()
	s := &subscription.Subscription{ID: "sub_1", Topics: []string{"orders"}, Endpoint: subscription.Endpoint{URL: url}}
	if err := s.EnsureSigningSecret(time.Now()); err != nil {
		t.Fatal(err)
	}
	return s
}

func message() *webhooks.Message {
	return &webhooks.Message{ID: "dlv_1", Key: []byte("k"), Value: []byte(`{"n":1}`), Source: "kafka://orders", ContentType: "application/json"}
}

func TestRenderedRequestsPassAStandardWebhooksVerifier(t *testing.T) {
	var sub *subscription.Subscription
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		wh, err := standardwebhooks.NewWebhook(sub.Signing.Secrets[0].Secret)
		if err == nil {
			err = wh.Verify(body, r.Header)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
		}
	})
	sub = newSub(t, rc.URL)
	ep := delivery.New(sub, webhooks.RetryPolicy{})
	c := newClient(t)

	single, err := ep.Render(message())
	if err != nil {
		t.Fatal(err)
	}
	batch, err := ep.RenderBatch([]*webhooks.Message{message(), {ID: "dlv_2", Value: []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	for name, req := range map[string]*webhooks.Request{"single": single, "batch": batch} {
		if a := c.Send(context.Background(), req, 1); a.Status != http.StatusOK {
			t.Errorf("%s: status %d (%s, err %v), want 200 from a verifying endpoint", name, a.Status, a.Body, a.Err)
		}
	}
}

func TestRenderedRequestsCarryTheEndpointCredentials(t *testing.T) {
	for _, tc := range []struct {
		name string
		auth subscription.EndpointAuth
		want func(h http.Header) bool
	}{
		{"bearer", subscription.EndpointAuth{BearerToken: "tok"}, func(h http.Header) bool { return h.Get("Authorization") == "Bearer tok" }},
		{"basic", subscription.EndpointAuth{BasicUsername: "u", BasicPassword: "p"}, func(h http.Header) bool { return h.Get("Authorization") == "Basic dTpw" }},
		{"static header", subscription.EndpointAuth{Headers: map[string]string{"X-Api-Key": "k"}}, func(h http.Header) bool { return h.Get("X-Api-Key") == "k" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := newReceiver(t, nil)
			sub := newSub(t, rc.URL)
			sub.Endpoint.Auth = &tc.auth
			sub.Endpoint.TimeoutMS = 1500
			req, err := delivery.New(sub, webhooks.RetryPolicy{}).Render(message())
			if err != nil {
				t.Fatal(err)
			}
			if req.Timeout != 1500*time.Millisecond {
				t.Errorf("timeout %s, want the endpoint's 1.5s", req.Timeout)
			}
			newClient(t).Send(context.Background(), req, 1)
			if got := rc.requests(); len(got) != 1 || !tc.want(got[0].header) {
				t.Errorf("endpoint got %v, want the %s credentials", got, tc.name)
			}
		})
	}
}

func TestRenderUsesTheSubscriptionFormatAndEnvelopesWhenBatching(t *testing.T) {
	for _, tc := range []struct {
		name   string
		format string
		batch  subscription.Batch
		wantCT string
	}{
		{"raw", "", subscription.Batch{}, "application/json"},
		{"structured cloudevents", string(webhooks.FormatCloudEventsStructured), subscription.Batch{}, "application/cloudevents+json"},
		{"batching sends envelopes", "", subscription.Batch{MaxRecords: 10}, "application/json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub := newSub(t, "http://example.com")
			sub.Format, sub.Batch = tc.format, tc.batch
			req, err := delivery.New(sub, webhooks.RetryPolicy{}).Render(message())
			if err != nil {
				t.Fatal(err)
			}
			if req.ContentType != tc.wantCT {
				t.Errorf("content type %q, want %q", req.ContentType, tc.wantCT)
			}
			if tc.batch.Enabled() && string(req.Body) == `{"n":1}` {
				t.Errorf("a batching subscription sent a single record raw, want an envelope")
			}
		})
	}
}

func TestPolicyFillsZeroFieldsFromTheDefaults(t *testing.T) {
	sub := newSub(t, "http://example.com")
	sub.Retry.MaxAttempts = 3
	got := delivery.New(sub, webhooks.RetryPolicy{MaxElapsed: time.Minute}).Policy()
	want := webhooks.RetryPolicy{MaxAttempts: 3, MaxElapsed: time.Minute}.WithDefaults()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("policy (-want +got):\n%s", diff)
	}
}

func TestSignerDropsARotatedOutSecretOnceItExpires(t *testing.T) {
	start := time.Now()
	sub := newSub(t, "http://example.com")
	if _, err := sub.RotateSigningSecret(start, time.Hour); err != nil {
		t.Fatal(err)
	}
	ep := delivery.New(sub, webhooks.RetryPolicy{})
	now := start
	delivery.SetClockForTest(ep, func() time.Time { return now })

	if n := len(ep.Signer().Secrets); n != 2 {
		t.Fatalf("during the overlap: %d secrets sign, want 2", n)
	}
	now = start.Add(time.Hour + time.Second)
	if n := len(ep.Signer().Secrets); n != 1 {
		t.Fatalf("after the old secret expired: %d secrets sign, want 1", n)
	}
}

func TestRenderFollowsRedirectsAsTheSubscriptionSays(t *testing.T) {
	type creds struct{ Authorization, APIKey string }
	for _, tc := range []struct {
		name        string
		follow      int
		crossOrigin bool
		wantStatus  int
		wantCreds   creds // at the target, when reached
	}{
		{"followed when on", 1, false, http.StatusOK, creds{"Bearer tok", "k"}},
		{"not followed when off", 0, false, http.StatusTemporaryRedirect, creds{}},
		{"credentials dropped on another origin", 1, true, http.StatusOK, creds{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := newReceiver(t, nil)
			var ep *receiver
			ep = newReceiver(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
				if r.URL.Path == "/start" {
					to := ep.URL + "/moved"
					if tc.crossOrigin {
						to = target.URL + "/moved"
					}
					http.Redirect(w, r, to, http.StatusTemporaryRedirect)
				}
			})
			sub := newSub(t, ep.URL+"/start")
			sub.Endpoint.FollowRedirects = tc.follow
			sub.Endpoint.Auth = &subscription.EndpointAuth{BearerToken: "tok", Headers: map[string]string{"X-Api-Key": "k"}}
			req, err := delivery.New(sub, webhooks.RetryPolicy{}).Render(message())
			if err != nil {
				t.Fatal(err)
			}

			a := newClient(t).Send(context.Background(), req, 1)

			if a.Status != tc.wantStatus {
				t.Fatalf("status %d (err %v), want %d", a.Status, a.Err, tc.wantStatus)
			}
			hops := ep.requests()[1:]
			if tc.crossOrigin {
				hops = target.requests()
			}
			if tc.follow == 0 {
				if len(hops) != 0 {
					t.Fatalf("redirect followed %d times, want not at all", len(hops))
				}
				return
			}
			if len(hops) != 1 {
				t.Fatalf("redirect target saw %d requests, want 1", len(hops))
			}
			h := hops[0].header
			if diff := cmp.Diff(tc.wantCreds, creds{h.Get("Authorization"), h.Get("X-Api-Key")}); diff != "" {
				t.Errorf("credentials after the hop (-want +got):\n%s", diff)
			}
			if h.Get(webhooks.HeaderWebhookSignature) == "" {
				t.Errorf("the hop lost the signature")
			}
		})
	}
}
