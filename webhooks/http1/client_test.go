package http1_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyhook/keyhook/webhooks/http1"
)

// dialCounter dials over TCP and counts the connections made.
type dialCounter struct{ n atomic.Int64 }

func (d *dialCounter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.n.Add(1)
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

func newClient(t *testing.T, cfg http1.Config) (*http1.Client, *dialCounter) {
	t.Helper()
	d := &dialCounter{}
	if cfg.Dial == nil {
		cfg.Dial = d.dial
	}
	c, err := http1.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdle)
	return c, d
}

func post(t *testing.T, c *http1.Client, addr string, body string) (http1.Response, error) {
	t.Helper()
	return c.Post(context.Background(), time.Now().Add(5*time.Second), &http1.Request{
		Addr: addr, Host: addr, Target: "/hook", Body: []byte(body), MaxBody: 16,
		Header: http.Header{"Content-Type": {"application/json"}},
	})
}

// scripted is a TCP endpoint that reads each request whole and answers
// it with the bytes of answer(n), n counting requests from 1 across
// connections; it closes the connection after an answer when close(n).
type scripted struct {
	ln       net.Listener
	requests atomic.Int64
	conns    atomic.Int64
	mu       sync.Mutex
	seen     []*http.Request
	bodies   []string
}

func serveScripted(t *testing.T, answer func(n int64) string, closeAfter func(n int64) bool) *scripted {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &scripted{ln: ln}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			wg.Go(func() {
				defer nc.Close()
				br := bufio.NewReader(nc)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					body, _ := io.ReadAll(req.Body)
					n := s.requests.Add(1)
					s.mu.Lock()
					s.seen, s.bodies = append(s.seen, req), append(s.bodies, string(body))
					s.mu.Unlock()
					if _, err := io.WriteString(nc, answer(n)); err != nil {
						return
					}
					if closeAfter != nil && closeAfter(n) {
						return
					}
				}
			})
		}
	})
	return s
}

func (s *scripted) addr() string { return s.ln.Addr().String() }

// Every shape of answer an endpoint may give is read as net/http reads it,
// and the connection is kept for the next request exactly when the answer
// was read to its end and the endpoint did not ask to close it.
func TestAnswersAreReadAndConnectionsKeptOnlyWhenReusable(t *testing.T) {
	long := strings.Repeat("x", 40)
	for _, tc := range []struct {
		name      string
		answer    string
		status    int
		body      string
		truncated bool
		reused    bool
	}{
		{"content length", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 200, "ok", false, true},
		{"no content", "HTTP/1.1 204 No Content\r\n\r\n", 204, "", false, true},
		{"chunked with trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n1\r\n!\r\n0\r\nX-T: 1\r\n\r\n", 200, "ok!", false, true},
		{"informational first", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n", 202, "", false, true},
		{"connection close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", 200, "ok", false, false},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", 200, "ok", false, false},
		{"HTTP/1.0 keep-alive", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok", 200, "ok", false, true},
		{"longer than kept, drained", "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 40\r\n\r\n" + long, 500, long[:16], true, true},
		{"chunked longer than kept", "HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n28\r\n" + long + "\r\n0\r\n\r\n", 503, long[:16], true, true},
		{"switching protocols", "HTTP/1.1 101 Switching Protocols\r\n\r\n", 101, "", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := serveScripted(t, func(int64) string { return tc.answer }, nil)
			c, dials := newClient(t, http1.Config{})
			resp, err := post(t, c, ep.addr(), "{}")
			if err != nil {
				t.Fatalf("Post: %v", err)
			}
			if resp.Status != tc.status || string(resp.Body) != tc.body || resp.Truncated != tc.truncated {
				t.Fatalf("Post = {%d %q truncated %v}, want {%d %q truncated %v}", resp.Status, resp.Body, resp.Truncated, tc.status, tc.body, tc.truncated)
			}
			if _, err := post(t, c, ep.addr(), "{}"); err != nil {
				t.Fatalf("second Post: %v", err)
			}
			want := int64(2)
			if tc.reused {
				want = 1
			}
			if got := dials.n.Load(); got != want {
				t.Errorf("two requests dialled %d connections, want %d (reused %v)", got, want, tc.reused)
			}
		})
	}
}

// A body without a length ends when the endpoint closes the connection:
// it is read to the close and the connection is not reused.
func TestBodyUntilCloseIsReadAndNotReused(t *testing.T) {
	ep := serveScripted(t, func(int64) string { return "HTTP/1.1 200 OK\r\n\r\nuntil close" }, func(int64) bool { return true })
	c, dials := newClient(t, http1.Config{})
	for range 2 {
		resp, err := post(t, c, ep.addr(), "{}")
		if err != nil || resp.Status != 200 || string(resp.Body) != "until close" {
			t.Fatalf("Post = {%d %q} %v, want 200 \"until close\"", resp.Status, resp.Body, err)
		}
	}
	if got := dials.n.Load(); got != 2 {
		t.Errorf("dialled %d connections, want 2", got)
	}
}

// A body longer than what is drained costs its connection: reading a
// large answer would cost more than a new connection.
func TestBodyLongerThanTheDrainClosesTheConnection(t *testing.T) {
	ep := serveScripted(t, func(int64) string {
		return "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + strings.Repeat("y", 100)
	}, nil)
	c, dials := newClient(t, http1.Config{DrainBytes: 10})
	for range 2 {
		resp, err := post(t, c, ep.addr(), "{}")
		if err != nil || !resp.Truncated || len(resp.Body) != 16 {
			t.Fatalf("Post = {%d, %d bytes, truncated %v} %v, want 16 bytes kept, truncated", resp.Status, len(resp.Body), resp.Truncated, err)
		}
	}
	if got := dials.n.Load(); got != 2 {
		t.Errorf("dialled %d connections, want 2", got)
	}
}

// The request goes out as net/http would frame it: method, target, Host,
// the caller's headers without the framing and hop-by-hop ones, the
// length, and the body, small or large.
func TestRequestIsFramedForTheEndpoint(t *testing.T) {
	ep := serveScripted(t, func(int64) string { return "HTTP/1.1 204 No Content\r\n\r\n" }, nil)
	c, _ := newClient(t, http1.Config{})
	large := strings.Repeat("z", 200<<10)
	for _, body := range []string{`{"a":1}`, large} {
		_, err := c.Post(context.Background(), time.Now().Add(5*time.Second), &http1.Request{
			Addr: ep.addr(), Host: "hooks.example:8080", Target: "/in?x=1&y=%20", Body: []byte(body),
			Header: http.Header{
				"Webhook-Id": {"msg_1"}, "X-Multi": {"a", "b"}, "X-Padded": {"  v \t"},
				"Content-Length": {"1"}, "Connection": {"close"}, "Transfer-Encoding": {"chunked"}, "Host": {"evil"},
			},
		})
		if err != nil {
			t.Fatalf("Post: %v", err)
		}
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	for i, want := range []string{`{"a":1}`, large} {
		r := ep.seen[i]
		if r.Method != http.MethodPost || r.RequestURI != "/in?x=1&y=%20" || r.Host != "hooks.example:8080" || r.ProtoMinor != 1 {
			t.Errorf("request %d: %s %s host %q HTTP/1.%d", i, r.Method, r.RequestURI, r.Host, r.ProtoMinor)
		}
		if r.ContentLength != int64(len(want)) || ep.bodies[i] != want || len(r.TransferEncoding) != 0 || r.Close {
			t.Errorf("request %d: length %d, body of %d bytes, transfer encoding %v, close %v", i, r.ContentLength, len(ep.bodies[i]), r.TransferEncoding, r.Close)
		}
		if got := r.Header.Get("Webhook-Id"); got != "msg_1" {
			t.Errorf("request %d: Webhook-Id %q", i, got)
		}
		if got := r.Header.Values("X-Multi"); len(got) != 2 || got[0] != "a" || got[1] != "b" {
			t.Errorf("request %d: X-Multi %q, want both values in order", i, got)
		}
		if got := r.Header.Get("X-Padded"); got != "v" {
			t.Errorf("request %d: X-Padded %q, want it trimmed", i, got)
		}
	}
}

// A header that would break the request's framing is refused before
// anything is dialled.
func TestInvalidHeadersAreRefusedBeforeDialling(t *testing.T) {
	c, dials := newClient(t, http1.Config{})
	for _, h := range []http.Header{{"Bad Name": {"v"}}, {"X-Split": {"a\r\nX-Injected: 1"}}, {"": {"v"}}} {
		_, err := c.Post(context.Background(), time.Now().Add(time.Second), &http1.Request{Addr: "127.0.0.1:1", Host: "h", Target: "/", Header: h})
		if !errors.Is(err, http1.ErrInvalidHeader) {
			t.Errorf("header %q: err %v, want ErrInvalidHeader", h, err)
		}
	}
	if dials.n.Load() != 0 {
		t.Errorf("dialled %d connections for refused requests", dials.n.Load())
	}
}

// An endpoint that closes a connection while it waits in the pool costs a
// new connection, not a failed attempt. One that closes a new connection
// without answering fails the request: it may have processed it.
func TestConnectionsClosedWhileIdleAreReplaced(t *testing.T) {
	ep := serveScripted(t, func(int64) string { return "HTTP/1.1 204 No Content\r\n\r\n" }, func(int64) bool { return true })
	c, dials := newClient(t, http1.Config{})
	for i := range 5 {
		if _, err := post(t, c, ep.addr(), "{}"); err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		time.Sleep(20 * time.Millisecond) // let the close arrive
	}
	if got := ep.requests.Load(); got != 5 {
		t.Errorf("endpoint saw %d requests, want 5", got)
	}
	t.Logf("%d dials for 5 requests on connections closed after each answer", dials.n.Load())

	// Several idle connections, all closed by the endpoint (its idle
	// timeout, a restart): the next request costs one new connection, not
	// one failure per stale connection.
	ep2 := serveScripted(t, func(int64) string {
		time.Sleep(20 * time.Millisecond) // keep the three requests on three connections
		return "HTTP/1.1 204 No Content\r\n\r\n"
	}, func(int64) bool { return true })
	c2, dials2 := newClient(t, http1.Config{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if _, err := post(t, c2, ep2.addr(), "{}"); err != nil {
				t.Errorf("warm-up: %v", err)
			}
		})
	}
	wg.Wait()
	time.Sleep(20 * time.Millisecond)
	warm := dials2.n.Load()
	if _, err := post(t, c2, ep2.addr(), "{}"); err != nil {
		t.Fatalf("request after the endpoint closed %d idle connections: %v", warm, err)
	}
	if got := dials2.n.Load() - warm; got != 1 {
		t.Errorf("the request after %d stale connections dialled %d, want 1", warm, got)
	}

	silent := serveScripted(t, func(int64) string { return "" }, func(int64) bool { return true })
	if _, err := post(t, c, silent.addr(), "{}"); err == nil {
		t.Fatal("Post to an endpoint closing without an answer succeeded")
	}
	if got := silent.requests.Load(); got != 1 {
		t.Errorf("endpoint closing a new connection without answering saw %d requests, want 1 (no retry)", got)
	}
}

// The deadline bounds the whole request, and cancelling the context ends
// it at once.
func TestDeadlineAndCancellationEndARequest(t *testing.T) {
	block := make(chan struct{})
	ep := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-block }))
	t.Cleanup(func() { close(block); ep.Close() })
	addr := strings.TrimPrefix(ep.URL, "http://")
	c, _ := newClient(t, http1.Config{})

	start := time.Now()
	_, err := c.Post(context.Background(), time.Now().Add(100*time.Millisecond), &http1.Request{Addr: addr, Host: addr, Target: "/"})
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("Post past its deadline: err %v, want a timeout", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Post past a 100ms deadline took %v", took)
	}

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start = time.Now()
	_, err = c.Post(ctx, time.Now().Add(time.Minute), &http1.Request{Addr: addr, Host: addr, Target: "/"})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Post cancelled: err %v, want context.Canceled", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("cancelled Post took %v", took)
	}
}

// Idle connections close after the idle timeout, so an endpoint no longer
// sent to does not keep its sockets.
func TestIdleConnectionsCloseAfterTheTimeout(t *testing.T) {
	var closed atomic.Int64
	ep := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }))
	ep.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed.Add(1)
		}
	}
	ep.Start()
	t.Cleanup(ep.Close)
	addr := strings.TrimPrefix(ep.URL, "http://")
	c, _ := newClient(t, http1.Config{IdleTimeout: 50 * time.Millisecond})
	if _, err := post(t, c, addr, "{}"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for closed.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if closed.Load() != 1 {
		t.Fatalf("idle connection still open 3s after a 50ms idle timeout")
	}
}

// Concurrent requests each get a connection, and once every sender has
// one, further requests dial none.
func TestConcurrentRequestsKeepTheirConnections(t *testing.T) {
	ep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(time.Millisecond)
		w.WriteHeader(204)
	}))
	t.Cleanup(ep.Close)
	addr := strings.TrimPrefix(ep.URL, "http://")
	c, dials := newClient(t, http1.Config{})
	run := func(n int) {
		var wg sync.WaitGroup
		for range 100 {
			wg.Go(func() {
				for range n {
					if resp, err := post(t, c, addr, "{}"); err != nil || resp.Status != 204 {
						t.Errorf("Post = %d, %v", resp.Status, err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	run(1)
	run(20)
	// A sender needs a connection of its own only while every other one
	// is busy: never more than one each.
	if got := dials.n.Load(); got > 100 {
		t.Errorf("2,100 requests from 100 senders dialled %d connections, want at most 100", got)
	}
}

func TestNewRefusesAConfigWithoutDial(t *testing.T) {
	if _, err := http1.New(http1.Config{}); err == nil || !strings.Contains(err.Error(), "Dial") {
		t.Errorf("New without Dial: %v, want an error naming Dial", err)
	}
	if _, err := http1.New(http1.Config{Dial: (&net.Dialer{}).DialContext, IdleTimeout: -1}); err == nil {
		t.Error("New with a negative idle timeout succeeded")
	}
}

// Whatever bytes an endpoint answers, Post returns by its deadline without
// panicking, keeps at most MaxBody bytes, and says truncated only with a
// full Body.
func FuzzAnswers(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.0 500 x\r\n\r\n" + strings.Repeat("e", 40),
		"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
		"garbage",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, answer []byte) {
		client, server := net.Pipe()
		go func() {
			defer server.Close()
			br := bufio.NewReader(server)
			if req, err := http.ReadRequest(br); err == nil {
				_, _ = io.Copy(io.Discard, req.Body)
			}
			_, _ = server.Write(answer)
		}()
		c, err := http1.New(http1.Config{Dial: func(context.Context, string, string) (net.Conn, error) { return client, nil }})
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseIdle()
		resp, err := c.Post(context.Background(), time.Now().Add(2*time.Second), &http1.Request{Addr: "fuzz:80", Host: "fuzz", Target: "/", Body: []byte("{}"), MaxBody: 16})
		if err != nil {
			return
		}
		if len(resp.Body) > 16 || resp.Truncated && len(resp.Body) != 16 {
			t.Fatalf("kept %d bytes (truncated %v) of an answer, max 16", len(resp.Body), resp.Truncated)
		}
		if !bytes.Contains(answer, []byte(strconv.Itoa(resp.Status))) {
			t.Fatalf("status %d is not in the answer %q", resp.Status, answer)
		}
	})
}

// A connection keeps watching the context of its last request while it
// waits in the pool, so the end of that context may cut it idle. The
// next request, of another context, must still go out on it, and one of
// a context that ended must fail with that context's error, whichever
// context the connection watched.
func TestAConnectionOutlivesTheContextsOfItsRequests(t *testing.T) {
	ep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(ep.Close)
	addr := strings.TrimPrefix(ep.URL, "http://")
	c, dials := newClient(t, http1.Config{})
	send := func(ctx context.Context) error {
		_, err := c.Post(ctx, time.Now().Add(5*time.Second), &http1.Request{Addr: addr, Host: addr, Target: "/"})
		return err
	}

	a, cancelA := context.WithCancel(context.Background())
	if err := send(a); err != nil {
		t.Fatal(err)
	}
	// Twice on one context: the watch is kept, the connection too.
	if err := send(context.WithValue(a, struct{}{}, 1)); err != nil {
		t.Fatal(err)
	}
	cancelA() // cuts the idle connection's deadline
	time.Sleep(20 * time.Millisecond)
	b, cancelB := context.WithCancel(context.Background())
	defer cancelB()
	if err := send(b); err != nil {
		t.Fatalf("request of a live context on a connection whose last context ended: %v", err)
	}
	if err := send(context.Background()); err != nil {
		t.Fatalf("request without a context to watch: %v", err)
	}
	if got := dials.n.Load(); got != 1 {
		t.Errorf("%d dials, want 1: the connection outlives the contexts", got)
	}
	if err := send(context.WithValue(a, struct{}{}, 2)); !errors.Is(err, context.Canceled) {
		t.Errorf("request of an ended context: err %v, want context.Canceled", err)
	}

	// Many senders, each with contexts of its own ended as they go, on a
	// few connections: every request of a live context gets its answer.
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 16 {
		wg.Go(func() {
			for range 50 {
				ctx, cancel := context.WithCancel(context.Background())
				if err := send(ctx); err != nil {
					failed.Add(1)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of 800 requests of live contexts failed", n)
	}
}

// The head is read within MaxHeadBytes, informational answers included,
// and past a bounded number of informational answers the request fails:
// an endpoint cannot make a request read without end.
func TestTheHeadIsReadWithinItsBounds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer string
		want   error
	}{
		{"long header", "HTTP/1.1 200 OK\r\nX-Long: " + strings.Repeat("a", 8<<10) + "\r\nContent-Length: 0\r\n\r\n", http1.ErrHeadTooLarge},
		{"long 1xx heads", strings.Repeat("HTTP/1.1 103 Early Hints\r\nLink: "+strings.Repeat("a", 1000)+"\r\n\r\n", 9) + "HTTP/1.1 204 No Content\r\n\r\n", http1.ErrHeadTooLarge},
		{"many 1xx", strings.Repeat("HTTP/1.1 102 Processing\r\n\r\n", 101) + "HTTP/1.1 204 No Content\r\n\r\n", http1.ErrTooManyInformational},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := serveScripted(t, func(int64) string { return tc.answer }, nil)
			c, _ := newClient(t, http1.Config{MaxHeadBytes: 8 << 10})
			if resp, err := post(t, c, ep.addr(), "{}"); !errors.Is(err, tc.want) {
				t.Errorf("Post: status %d, err %v; want %v", resp.Status, err, tc.want)
			}
		})
	}
	ep := serveScripted(t, func(int64) string {
		return strings.Repeat("HTTP/1.1 102 Processing\r\n\r\n", 100) + "HTTP/1.1 204 No Content\r\n\r\n"
	}, nil)
	c, _ := newClient(t, http1.Config{})
	if resp, err := post(t, c, ep.addr(), "{}"); err != nil || resp.Status != http.StatusNoContent {
		t.Errorf("100 informational answers, then 204: status %d, err %v; want the 204", resp.Status, err)
	}
}

func TestNewRefusesNegativeBounds(t *testing.T) {
	dial := (&net.Dialer{}).DialContext
	for _, cfg := range []http1.Config{{Dial: dial, MaxHeadBytes: -1}, {Dial: dial, BodyTimeout: -1}} {
		if _, err := http1.New(cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}
