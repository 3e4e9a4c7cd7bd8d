package webhooks_test

import (
	"context"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/keyhook/keyhook/webhooks"
)

// The client dials through its own DialContext (the address check), which
// turns net/http's automatic HTTP/2 off unless asked for: an https
// endpoint that speaks HTTP/2 must get it, many deliveries on one
// connection.
func TestHTTPSEndpointsAreSpokenToOverHTTP2(t *testing.T) {
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
	c := newClient(t, webhooks.ClientConfig{})
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	webhooks.TrustRootsForTest(c, roots)

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
