package webhooks_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/keyhook/keyhook/webhooks"
)

// tlsEndpoint is an https test server answering 204 that counts the
// connections it accepted and records each request's protocol.
type tlsEndpoint struct {
	*httptest.Server
	conns  atomic.Int64
	mu     sync.Mutex
	protos []string
}

func newTLSEndpoint(t *testing.T, h2 bool, cfg *tls.Config) *tlsEndpoint {
	t.Helper()
	e := &tlsEndpoint{}
	e.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.protos = append(e.protos, r.Proto)
		e.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	e.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			e.conns.Add(1)
		}
	}
	e.EnableHTTP2 = h2
	e.TLS = cfg
	e.StartTLS()
	t.Cleanup(e.Close)
	return e
}

func (e *tlsEndpoint) roots() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(e.Certificate())
	return p
}

func (e *tlsEndpoint) seenProtos() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.protos)
}

// An https endpoint that does not speak HTTP/2 gets the http1 client
// over TLS after one refused HTTP/2 handshake, and a TLS 1.3 connection
// is reused although the server sends session tickets after the
// handshake: records of TLS alone on an idle connection are no answer
// nobody asked for.
func TestHTTPSEndpointsWithoutHTTP2KeepTheirConnectionsOnTheHTTP1Client(t *testing.T) {
	for _, version := range []uint16{tls.VersionTLS13, tls.VersionTLS12} {
		t.Run(tls.VersionName(version), func(t *testing.T) {
			ep := newTLSEndpoint(t, false, &tls.Config{MinVersion: version, MaxVersion: version})
			c := newClient(t, webhooks.ClientConfig{RootCAs: ep.roots()})
			const n = 20
			for i := range n {
				if a := c.Send(context.Background(), &webhooks.Request{URL: ep.URL + "/hook", Body: []byte("{}")}, 1); a.Err != nil || a.Status != http.StatusNoContent {
					t.Fatalf("request %d: status %d, err %v", i, a.Status, a.Err)
				}
			}
			// The refused HTTP/2 handshake, then one connection for all.
			if got := ep.conns.Load(); got != 2 {
				t.Errorf("%d requests one after another took %d connections, want 2: the refused HTTP/2 one, then one HTTP/1.1 connection", n, got)
			}
			for i, p := range ep.seenProtos() {
				if p != "HTTP/1.1" {
					t.Errorf("request %d spoke %s, want HTTP/1.1 (the http1 client)", i+1, p)
				}
			}
		})
	}
}

// Both ways to an https endpoint check its certificate: a certificate
// from authorities the client does not trust fails the attempt, whether
// the endpoint speaks HTTP/2 (net/http) or not (the http1 client).
func TestHTTPSEndpointsWithAnUntrustedCertificateAreRefused(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		ep := newTLSEndpoint(t, h2, nil)
		c := newClient(t, webhooks.ClientConfig{})
		a := c.Send(context.Background(), &webhooks.Request{URL: ep.URL + "/hook", Body: []byte("{}")}, 1)
		if a.Err == nil || a.Status != 0 {
			t.Fatalf("HTTP/2 %v: status %d, err %v; want a certificate error", h2, a.Status, a.Err)
		}
		if ep.seenProtos() != nil {
			t.Errorf("HTTP/2 %v: the endpoint got %d requests over a connection the client should have refused", h2, len(ep.seenProtos()))
		}
	}
}

// An https endpoint that speaks HTTP/2 gets it, over one multiplexed
// connection, whether it also speaks HTTP/1.1 or refuses it in its
// handshake (the no_application_protocol alert): HTTP/2 frames belong to
// their stream, so no answer can be taken for another request's.
func TestHTTPSEndpointsSpeakingHTTP2GetIt(t *testing.T) {
	for _, only := range []bool{false, true} {
		var ep *tlsEndpoint
		cfg := &tls.Config{}
		if only {
			cfg.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
				c := ep.TLS.Clone()
				c.GetConfigForClient = nil
				if !slices.Contains(hello.SupportedProtos, "h2") {
					// No protocol in common: crypto/tls answers with the
					// alert.
					c.NextProtos = []string{"h2-only"}
				}
				return c, nil
			}
		}
		ep = newTLSEndpoint(t, true, cfg)
		c := newClient(t, webhooks.ClientConfig{RootCAs: ep.roots()})
		for i := range 3 {
			if a := c.Send(context.Background(), &webhooks.Request{URL: ep.URL + "/hook", Body: []byte("{}")}, 1); a.Err != nil || a.Status != http.StatusNoContent {
				t.Fatalf("HTTP/2 only %v, request %d: status %d, err %v", only, i, a.Status, a.Err)
			}
		}
		if got := ep.seenProtos(); !slices.Equal(got, []string{"HTTP/2.0", "HTTP/2.0", "HTTP/2.0"}) {
			t.Errorf("HTTP/2 only %v: protocols %q, want HTTP/2.0 three times", only, got)
		}
		if got := ep.conns.Load(); got != 1 {
			t.Errorf("HTTP/2 only %v: %d connections, want 1", only, got)
		}
	}
}
