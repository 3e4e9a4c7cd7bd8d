package webhooks_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keyhook/keyhook/webhooks"
)

// seenRequest is what an endpoint recorded of one request.
type seenRequest struct {
	Header http.Header
	Body   []byte
}

// endpoint is a real HTTP server on 127.0.0.1 that records what it receives
// and counts the connections opened to it.
type endpoint struct {
	*httptest.Server
	conns atomic.Int32

	mu   sync.Mutex
	seen []seenRequest
}

// newEndpoint starts a server whose handler is called with the 1-based
// number of the request.
func newEndpoint(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, n int)) *endpoint {
	t.Helper()
	e := &endpoint{}
	e.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		e.mu.Lock()
		e.seen = append(e.seen, seenRequest{Header: r.Header.Clone(), Body: body})
		n := len(e.seen)
		e.mu.Unlock()
		handle(w, r, n)
	}))
	e.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			e.conns.Add(1)
		}
	}
	e.Start()
	t.Cleanup(e.Close)
	return e
}

// statuses returns a handler answering the given statuses in turn, then
// the last one forever.
func statuses(codes ...int) func(http.ResponseWriter, *http.Request, int) {
	return func(w http.ResponseWriter, _ *http.Request, n int) {
		w.WriteHeader(codes[min(n, len(codes))-1])
	}
}

func (e *endpoint) requests() []seenRequest {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]seenRequest(nil), e.seen...)
}

// newClient builds a client that may reach the loopback test servers.
func newClient(t *testing.T, cfg webhooks.ClientConfig) *webhooks.Client {
	t.Helper()
	cfg.Policy.AllowPrivate = true
	return newStrictClient(t, cfg)
}

// newStrictClient builds a client with cfg's address policy as is.
func newStrictClient(t *testing.T, cfg webhooks.ClientConfig) *webhooks.Client {
	t.Helper()
	c, err := webhooks.NewClient(cfg)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func TestSendSetsDeliveryHeadersAndCopiesCallerHeaders(t *testing.T) {
	ep := newEndpoint(t, statuses(http.StatusNoContent))
	c := newClient(t, webhooks.ClientConfig{UserAgent: "keyhook/test"})
	req := &webhooks.Request{
		URL:         ep.URL + "/hook",
		Body:        []byte(`{"order":42}`),
		ContentType: "application/json",
		Header: http.Header{
			"Keyhook-Topic": {"orders"},
			"X-Multi":       {"a", "b"},
			// Send owns these two: a caller's value must not win.
			"Keyhook-Attempt": {"99"},
			"webhook-id":      {"forged"},
			"Content-Type":    {"text/plain"},
		},
		DeliveryID: "orders-0-42",
	}

	a := c.Send(context.Background(), req, 3)

	if a.Err != nil || a.Status != http.StatusNoContent || a.Number != 3 {
		t.Fatalf("Send = {Number %d, Status %d, Err %v}, want {3, 204, nil}", a.Number, a.Status, a.Err)
	}
	got := ep.requests()
	if len(got) != 1 {
		t.Fatalf("endpoint saw %d requests, want 1", len(got))
	}
	h := got[0].Header
	want := map[string][]string{
		"Content-Type":    {"application/json"},
		"User-Agent":      {"keyhook/test"},
		"Keyhook-Attempt": {"3"},
		"Webhook-Id":      {"orders-0-42"},
		"Keyhook-Topic":   {"orders"},
		"X-Multi":         {"a", "b"},
	}
	gotSubset := map[string][]string{}
	for k := range want {
		gotSubset[k] = h.Values(k)
	}
	if diff := cmp.Diff(want, gotSubset); diff != "" {
		t.Errorf("request headers (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(req.Body, got[0].Body); diff != "" {
		t.Errorf("request body (-want +got):\n%s", diff)
	}
}

func TestSendDefaultsContentTypeAndUserAgentAndOmitsEmptyDeliveryID(t *testing.T) {
	ep := newEndpoint(t, statuses(http.StatusOK))
	c := newClient(t, webhooks.ClientConfig{})

	a := c.Send(context.Background(), &webhooks.Request{URL: ep.URL, Body: []byte("raw")}, 1)

	if a.Status != http.StatusOK {
		t.Fatalf("Send: status %d, err %v; want 200", a.Status, a.Err)
	}
	h := ep.requests()[0].Header
	got := []string{h.Get("Content-Type"), h.Get("User-Agent"), h.Get("Webhook-Id")}
	if diff := cmp.Diff([]string{"application/octet-stream", "keyhook", ""}, got); diff != "" {
		t.Errorf("Content-Type, User-Agent, webhook-id (-want +got):\n%s", diff)
	}
}

func TestSendRefusesForbiddenAddressAtDialTimeBeforeTheServerSeesAnything(t *testing.T) {
	ep := newEndpoint(t, statuses(http.StatusOK))
	// The URL by name: what is checked is the resolved address, not the text.
	byName := strings.Replace(ep.URL, "127.0.0.1", "localhost", 1)
	tests := []struct {
		name     string
		url      string
		wantHost string
	}{
		{"IP literal", ep.URL + "/hook?token=s3cret", "127.0.0.1"},
		{"host name resolving to loopback", byName + "/hook?token=s3cret", "localhost"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newStrictClient(t, webhooks.ClientConfig{Policy: webhooks.AddressPolicy{Resolver: offlineResolver()}})

			a := c.Send(context.Background(), &webhooks.Request{URL: tt.url}, 1)

			var fa *webhooks.ErrForbiddenAddress
			if !errors.As(a.Err, &fa) {
				t.Fatalf("Send err = %v, want *ErrForbiddenAddress", a.Err)
			}
			if fa.Host != tt.wantHost || !fa.Addr.IsLoopback() || fa.Reason != "a loopback address" {
				t.Errorf("ErrForbiddenAddress = %+v, want host %q, a loopback address", fa, tt.wantHost)
			}
			if a.Status != 0 {
				t.Errorf("status = %d, want 0", a.Status)
			}
			if got := webhooks.Classify(a); got != webhooks.OutcomeFinal {
				t.Errorf("Classify = %s, want final", got)
			}
			if strings.Contains(a.Err.Error(), "s3cret") {
				t.Errorf("error %q leaks the query string", a.Err)
			}
		})
	}
	if n, c := len(ep.requests()), ep.conns.Load(); n != 0 || c != 0 {
		t.Errorf("endpoint saw %d requests on %d connections, want none", n, c)
	}
}

func TestSendKeepsOnlyTheBodyPrefixAndReusesTheConnection(t *testing.T) {
	const limit = 16
	tests := []struct {
		name      string
		bodySize  int
		wantConns int32
	}{
		{"small body", 10, 1},
		{"body over the limit is drained", 64 << 10, 1},
		{"body over the drain limit closes the connection", 3 << 20, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := bytes.Repeat([]byte("0123456789abcdef"), tt.bodySize/16+1)[:tt.bodySize]
			ep := newEndpoint(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write(body)
			})
			c := newClient(t, webhooks.ClientConfig{MaxResponseBytes: limit})
			want := body[:min(limit, len(body))]

			for i := 1; i <= 2; i++ {
				a := c.Send(context.Background(), &webhooks.Request{URL: ep.URL}, i)
				if a.Status != http.StatusServiceUnavailable {
					t.Fatalf("attempt %d: status %d, err %v; want 503", i, a.Status, a.Err)
				}
				if diff := cmp.Diff(want, a.Body); diff != "" {
					t.Errorf("attempt %d body (-want +got):\n%s", i, diff)
				}
			}
			if got := ep.conns.Load(); got != tt.wantConns {
				t.Errorf("connections opened = %d, want %d", got, tt.wantConns)
			}
		})
	}
}

func TestSendDoesNotFollowRedirects(t *testing.T) {
	target := newEndpoint(t, statuses(http.StatusOK))
	ep := newEndpoint(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		http.Redirect(w, r, target.URL+"/elsewhere", http.StatusFound)
	})
	c := newClient(t, webhooks.ClientConfig{})

	a := c.Send(context.Background(), &webhooks.Request{URL: ep.URL}, 1)

	if a.Status != http.StatusFound || a.Err != nil {
		t.Fatalf("Send = status %d, err %v; want 302, nil", a.Status, a.Err)
	}
	if got := webhooks.Classify(a); got != webhooks.OutcomeFinal {
		t.Errorf("Classify(302) = %s, want final", got)
	}
	if n, conns := len(target.requests()), target.conns.Load(); n != 0 || conns != 0 {
		t.Errorf("redirect target saw %d requests on %d connections, want none", n, conns)
	}
}

func TestSendTimesOutASlowEndpointAndRetriesIt(t *testing.T) {
	ep := newEndpoint(t, func(_ http.ResponseWriter, r *http.Request, _ int) {
		<-r.Context().Done()
	})
	c := newClient(t, webhooks.ClientConfig{Timeout: 100 * time.Millisecond})

	a := c.Send(context.Background(), &webhooks.Request{URL: ep.URL}, 1)

	if a.Status != 0 || !errors.Is(a.Err, context.DeadlineExceeded) {
		t.Fatalf("Send = status %d, err %v; want 0, a deadline error", a.Status, a.Err)
	}
	if !strings.Contains(a.Err.Error(), "attempt timed out after 100ms") {
		t.Errorf("error %q does not say the attempt timed out", a.Err)
	}
	if got := webhooks.Classify(a); got != webhooks.OutcomeRetry {
		t.Errorf("Classify = %s, want retry", got)
	}
	if a.Duration < 100*time.Millisecond {
		t.Errorf("Duration = %s, want at least the timeout", a.Duration)
	}
}

func TestSendRetriesRefusedConnectionsWithoutLeakingTheURL(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there any more
	c := newClient(t, webhooks.ClientConfig{})

	a := c.Send(context.Background(), &webhooks.Request{URL: "http://" + addr + "/services/T0/B0/s3cret?token=s3cret"}, 1)

	if a.Err == nil || a.Status != 0 {
		t.Fatalf("Send = status %d, err %v; want a connection error", a.Status, a.Err)
	}
	if got := webhooks.Classify(a); got != webhooks.OutcomeRetry {
		t.Errorf("Classify(%v) = %s, want retry", a.Err, got)
	}
	if msg := a.Err.Error(); strings.Contains(msg, "s3cret") || !strings.Contains(msg, addr) {
		t.Errorf("error %q should name %s and hide path and query", msg, addr)
	}
}

func TestSendMakesUnusableURLsFinal(t *testing.T) {
	c := newClient(t, webhooks.ClientConfig{})
	for _, u := range []string{"ftp://example.com/x", "http:///nohost", "http://example.com/%zz?token=s3cret", "relative/path"} {
		a := c.Send(context.Background(), &webhooks.Request{URL: u}, 1)
		if !errors.Is(a.Err, webhooks.ErrInvalidURL) {
			t.Errorf("Send(%q) err = %v, want ErrInvalidURL", u, a.Err)
			continue
		}
		if got := webhooks.Classify(a); got != webhooks.OutcomeFinal {
			t.Errorf("Classify(Send(%q)) = %s, want final", u, got)
		}
		if strings.Contains(a.Err.Error(), "s3cret") {
			t.Errorf("error %q leaks the query string", a.Err)
		}
	}
}

func TestSendReportsRetryAfter(t *testing.T) {
	ep := newEndpoint(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		w.Header().Set("Retry-After", "12")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	c := newClient(t, webhooks.ClientConfig{})

	a := c.Send(context.Background(), &webhooks.Request{URL: ep.URL}, 1)

	if a.Status != http.StatusTooManyRequests || a.RetryAfter != 12*time.Second {
		t.Errorf("Send = status %d, RetryAfter %s; want 429, 12s", a.Status, a.RetryAfter)
	}
}

func TestNewClientRejectsNegativeSettings(t *testing.T) {
	tests := []struct {
		cfg  webhooks.ClientConfig
		want string
	}{
		{webhooks.ClientConfig{Timeout: -time.Second}, "webhooks: client timeout must not be negative"},
		{webhooks.ClientConfig{MaxResponseBytes: -1}, "webhooks: client max response bytes must not be negative"},
		{webhooks.ClientConfig{MaxIdleConnsPerHost: -1}, "webhooks: client max idle conns per host must not be negative"},
	}
	for _, tt := range tests {
		_, err := webhooks.NewClient(tt.cfg)
		if err == nil || err.Error() != tt.want {
			t.Errorf("NewClient(%+v) = %v, want %q", tt.cfg, err, tt.want)
		}
	}
}

func TestSendMakesUnsendableHeadersFinalWithoutSending(t *testing.T) {
	ep := newEndpoint(t, statuses(http.StatusOK))
	c := newClient(t, webhooks.ClientConfig{})
	tests := map[string]*webhooks.Request{
		"header name with a space": {URL: ep.URL, Header: http.Header{"Bad Name": {"v"}}},
		"header value with CRLF":   {URL: ep.URL, Header: http.Header{"X-Topic": {"orders\r\nX-Evil: 1"}}},
		"content type with LF":     {URL: ep.URL, ContentType: "text/plain\nX-Evil: 1"},
		"delivery id with NUL":     {URL: ep.URL, DeliveryID: "dlv\x00"},
	}
	for name, req := range tests {
		a := c.Send(context.Background(), req, 1)
		if !errors.Is(a.Err, webhooks.ErrInvalidRequest) || webhooks.Classify(a) != webhooks.OutcomeFinal {
			t.Errorf("%s: Send = {status %d, err %v}, want a final ErrInvalidRequest", name, a.Status, a.Err)
			continue
		}
		if strings.Contains(a.Err.Error(), "Evil") {
			t.Errorf("%s: error %q repeats the value", name, a.Err)
		}
	}
	if n, conns := len(ep.requests()), ep.conns.Load(); n != 0 || conns != 0 {
		t.Errorf("endpoint saw %d requests on %d connections, want none", n, conns)
	}
}

// A request's own timeout overrides the client's, in both directions.
func TestRequestTimeoutOverridesTheClients(t *testing.T) {
	ep := newEndpoint(t, func(_ http.ResponseWriter, r *http.Request, _ int) {
		<-r.Context().Done()
	})
	c := newClient(t, webhooks.ClientConfig{Timeout: 10 * time.Second})
	started := time.Now()
	a := c.Send(context.Background(), &webhooks.Request{URL: ep.URL, Timeout: 50 * time.Millisecond}, 1)
	if !errors.Is(a.Err, context.DeadlineExceeded) || !strings.Contains(a.Err.Error(), "after 50ms") {
		t.Fatalf("Send err = %v, want a timeout after 50ms", a.Err)
	}
	if took := time.Since(started); took > 5*time.Second {
		t.Errorf("attempt took %v: the client's 10s timeout applied, not the request's", took)
	}
}
