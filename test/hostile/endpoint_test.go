package hostile_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/webhooks"
)

// reply is how a scripted endpoint answers one request.
type reply struct {
	// answer is written once the request has been read whole.
	answer string
	// stream, if set, writes after answer until a write fails (the client
	// hung up) or the test ends; it returns what it wrote.
	stream func(w io.Writer) int64
	// later is written after answer, once the client has had the answer
	// for a while: bytes arriving on a connection while it is idle.
	later string
	// close closes the connection after the answer (and later); hang
	// keeps it open without a word more until the test ends.
	close, hang bool
}

// seen is a request as the endpoint read it.
type seen struct {
	conn           int
	path           string
	attempt        string
	id, idempotent string
}

// endpoint is a raw TCP endpoint that answers the n-th request it reads
// (n from 1, across connections) with script(n, request).
type endpoint struct {
	ln     net.Listener
	scheme string
	// roots verify the endpoint's certificate when it speaks TLS.
	roots  *x509.CertPool
	done   chan struct{}
	mu     sync.Mutex
	conns  []net.Conn
	seen   []seen
	wrote  int64         // what the streams wrote
	idle   chan struct{} // receives once per later written
	script func(n int, r *http.Request) reply
}

func serve(t *testing.T, script func(n int, r *http.Request) reply) *endpoint {
	t.Helper()
	return serveOn(t, false, script)
}

// serveOn is serve, behind TLS when secure: the script's bytes are what
// the TLS layer carries, written record by record as they come (a TLS
// 1.3 server, session tickets after the handshake).
func serveOn(t *testing.T, secure bool, script func(n int, r *http.Request) reply) *endpoint {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &endpoint{ln: ln, scheme: "http", done: make(chan struct{}), idle: make(chan struct{}, 64), script: script}
	if secure {
		files := testutil.GenerateTLS(t)
		cfg := files.ServerConfig(false)
		cfg.NextProtos = []string{"http/1.1"}
		cfg.MinVersion = tls.VersionTLS13
		// Records of 16 KiB from the first byte: an answer and what
		// follows it share one, and the client's reader may leave the
		// rest in the TLS layer, below its read buffer.
		cfg.DynamicRecordSizingDisabled = true
		e.ln, e.scheme, e.roots = tls.NewListener(ln, cfg), "https", files.CAPool
		ln = e.ln
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		close(e.done)
		_ = ln.Close()
		e.mu.Lock()
		for _, nc := range e.conns {
			_ = nc.Close() // ends a handler blocked reading or writing
		}
		e.mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for conn := 1; ; conn++ {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			e.mu.Lock()
			e.conns = append(e.conns, nc)
			e.mu.Unlock()
			wg.Go(func() { e.handle(nc, conn) })
		}
	})
	return e
}

func (e *endpoint) handle(nc net.Conn, conn int) {
	defer nc.Close()
	br := bufio.NewReader(nc)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		e.mu.Lock()
		e.seen = append(e.seen, seen{conn: conn, path: req.URL.Path, attempt: req.Header.Get(webhooks.HeaderAttempt),
			id: req.Header.Get(webhooks.HeaderWebhookID), idempotent: req.Header.Get("Idempotency-Key")})
		n := len(e.seen)
		e.mu.Unlock()
		rp := e.script(n, req)
		if _, err := io.WriteString(nc, rp.answer); err != nil {
			return
		}
		if rp.stream != nil {
			w := rp.stream(nc)
			e.mu.Lock()
			e.wrote += w
			e.mu.Unlock()
			return
		}
		if rp.later != "" {
			select {
			case <-time.After(30 * time.Millisecond):
			case <-e.done:
				return
			}
			_, _ = io.WriteString(nc, rp.later)
			e.idle <- struct{}{}
		}
		if rp.hang {
			<-e.done
			return
		}
		if rp.close {
			return
		}
	}
}

func (e *endpoint) url(path string) string { return e.scheme + "://" + e.ln.Addr().String() + path }

func (e *endpoint) requests() []seen {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]seen(nil), e.seen...)
}

func (e *endpoint) streamed() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.wrote
}

// endless writes chunk until a write fails, at most limit bytes (0: no
// limit), then tail.
func endless(chunk string, limit int64, tail string) func(io.Writer) int64 {
	return func(w io.Writer) int64 {
		var n int64
		for limit == 0 || n < limit {
			m, err := io.WriteString(w, chunk)
			n += int64(m)
			if err != nil {
				return n
			}
		}
		m, _ := io.WriteString(w, tail)
		return n + int64(m)
	}
}

// transport is a way the client speaks to an endpoint: through the http1
// client or net/http, over plain TCP or TLS.
type transport struct {
	name         string
	netHTTP, tls bool
}

// transports are the two ways the client speaks plain http.
var transports = []transport{{"http1", false, false}, {"net-http", true, false}}

// transportsTLS are transports and the same two over TLS.
var transportsTLS = append(transports[:len(transports):len(transports)],
	transport{"http1-tls", false, true}, transport{"net-http-tls", true, true})

// serve is serveOn over tr.
func (tr transport) serve(t *testing.T, script func(n int, r *http.Request) reply) *endpoint {
	t.Helper()
	return serveOn(t, tr.tls, script)
}

// client is newClient for tr, trusting ep's certificate.
func (tr transport) client(t *testing.T, ep *endpoint, cfg webhooks.ClientConfig) *webhooks.Client {
	t.Helper()
	cfg.RootCAs = ep.roots
	return newClient(t, tr.netHTTP, cfg)
}

func newClient(t *testing.T, netHTTP bool, cfg webhooks.ClientConfig) *webhooks.Client {
	t.Helper()
	cfg.Policy.AllowPrivate = true
	cfg.NetHTTPOnly = netHTTP
	c, err := webhooks.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func send(c *webhooks.Client, url, id string, attempt int) webhooks.Attempt {
	return c.Send(context.Background(), &webhooks.Request{URL: url, Body: []byte(`{"id":"` + id + `"}`), DeliveryID: id}, attempt)
}

// healthy runs deliveries to an endpoint that answers each with its own
// delivery id, on c, until the test's attack is over; stop reports those
// that failed or got another's answer.
func healthy(t *testing.T, c *webhooks.Client) (stop func()) {
	t.Helper()
	ep := serve(t, func(_ int, r *http.Request) reply {
		id := r.Header.Get(webhooks.HeaderWebhookID)
		return reply{answer: "HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(id)) + "\r\n\r\n" + id}
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad []string
	sent := 0
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			id := "healthy-" + strconv.Itoa(i)
			a := send(c, ep.url("/healthy"), id, 1)
			mu.Lock()
			sent++
			if a.Status != http.StatusOK || string(a.Body) != id {
				bad = append(bad, id+": status "+strconv.Itoa(a.Status)+", body "+string(a.Body)+", err "+errText(a.Err))
			}
			mu.Unlock()
		}
	})
	return func() {
		cancel()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(bad) > 0 {
			t.Errorf("healthy endpoint beside the attack: %d of %d deliveries went wrong, first: %s", len(bad), sent, bad[0])
		}
		if sent == 0 {
			t.Error("healthy endpoint beside the attack got no delivery")
		}
	}
}

func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// isTimeout reports an attempt ended by its deadline.
func isTimeout(a webhooks.Attempt) bool {
	return a.Err != nil && (strings.Contains(a.Err.Error(), "timed out") || strings.Contains(a.Err.Error(), "deadline exceeded"))
}
