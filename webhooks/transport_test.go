package webhooks_test

import (
	"context"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyhook/keyhook/webhooks"
)

// The client dials through its own DialContext (the address check), which
// turns net/http's automatic HTTP/2 off unless asked for: an https
// endpoint that speaks HTTP/2 must get it from net/http, many deliveries
// on one connection.
func TestNetHTTPSpeaksHTTP2ToHTTPSEndpoints(t *testing.T) {
	var mu sync.Mutex
	var protos []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		protos = append(protos, r.Proto)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	c := newClient(t, webhooks.ClientConfig{NetHTTPOnly: true, RootCAs: roots})

	for n := 1; n <= 3; n++ {
		if a := c.Send(context.Background(), &webhooks.Request{URL: srv.URL + "/hook", Body: []byte("{}")}, n); a.Err != nil || a.Status != http.StatusNoContent {
			t.Fatalf("attempt %d: status %d, err %v", n, a.Status, a.Err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, p := range protos {
		if p != "HTTP/2.0" {
			t.Errorf("request %d spoke %s, want HTTP/2.0", i+1, p)
		}
	}
}

// Idle connections close after a while, so that endpoints a node stopped
// delivering to do not hold its sockets for ever.
func TestIdleConnectionsHaveATimeout(t *testing.T) {
	c := newClient(t, webhooks.ClientConfig{})
	if got := webhooks.IdleConnTimeoutForTest(c); got <= 0 || got > 5*time.Minute {
		t.Errorf("idle connection timeout %v, want a bound between 0 and 5m", got)
	}
}

// Responses are read only for diagnostics and batch results, a few bytes
// each: asking endpoints to compress them would cost a header on every
// request and a gzip reader on every compressed answer, for nothing.
func TestSendDoesNotAskForCompressedResponses(t *testing.T) {
	ep := newEndpoint(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		_, _ = w.Write([]byte(`{"ok":true}`))
	})
	c := newClient(t, webhooks.ClientConfig{})

	a := c.Send(context.Background(), &webhooks.Request{URL: ep.URL, Body: []byte("{}")}, 1)

	if a.Status != http.StatusOK || string(a.Body) != `{"ok":true}` {
		t.Fatalf("Send = {Status %d, Body %q, Err %v}, want 200 and the body as sent", a.Status, a.Body, a.Err)
	}
	if got := ep.requests()[0].Header.Values("Accept-Encoding"); len(got) != 0 {
		t.Errorf("request asked for Accept-Encoding %q, want no Accept-Encoding", got)
	}
}

// http and https endpoints get the http1 client; anything net/http does
// that it does not (redirects, credentials in the URL), and an
// operator's choice of net/http, keeps net/http.
func TestPlainHTTPAttemptsGoThroughTheHTTP1Client(t *testing.T) {
	def := newClient(t, webhooks.ClientConfig{})
	netOnly := newClient(t, webhooks.ClientConfig{NetHTTPOnly: true})
	redirecting := newClient(t, webhooks.ClientConfig{FollowRedirects: 2})
	for _, tc := range []struct {
		name string
		c    *webhooks.Client
		r    webhooks.Request
		want bool
	}{
		{"http", def, webhooks.Request{URL: "http://hooks.example/in?x=1"}, true},
		{"http with a port", def, webhooks.Request{URL: "http://10.0.0.1:8080/"}, true},
		{"https", def, webhooks.Request{URL: "https://hooks.example/in"}, true},
		{"credentials in the URL", def, webhooks.Request{URL: "http://u:p@hooks.example/"}, false},
		{"unicode host", def, webhooks.Request{URL: "http://bücher.example/"}, false},
		{"redirects followed by the request", def, webhooks.Request{URL: "http://hooks.example/", FollowRedirects: 1}, false},
		{"redirects followed by the client", redirecting, webhooks.Request{URL: "http://hooks.example/"}, false},
		{"net/http chosen", netOnly, webhooks.Request{URL: "http://hooks.example/"}, false},
	} {
		if got := webhooks.ViaHTTP1ForTest(tc.c, &tc.r); got != tc.want {
			t.Errorf("%s: via http1 %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Both transports give the same outcome for the same answers.
func TestBothTransportsReadAnswersAlike(t *testing.T) {
	ep := newEndpoint(t, func(w http.ResponseWriter, _ *http.Request, n int) {
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(strings.Repeat("e", 100)))
	})
	for _, netOnly := range []bool{false, true} {
		c := newClient(t, webhooks.ClientConfig{NetHTTPOnly: netOnly, MaxResponseBytes: 10})
		a := c.Send(context.Background(), &webhooks.Request{URL: ep.URL, Body: []byte("{}")}, 1)
		if a.Err != nil || a.Status != http.StatusServiceUnavailable || a.RetryAfter != 7*time.Second || string(a.Body) != "eeeeeeeeee" || !a.BodyTruncated {
			t.Errorf("net/http only %v: Send = {Status %d, RetryAfter %v, Body %q, truncated %v, Err %v}", netOnly, a.Status, a.RetryAfter, a.Body, a.BodyTruncated, a.Err)
		}
	}
}
