package hostile_test

import (
	"io"
	"log"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyhook/keyhook/webhooks"
)

const (
	refusal = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nnope"
	forged  = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged"
)

// wrongAnswer reports an attempt that took bytes it did not follow for its
// answer. On the http1 client, over TCP or TLS, that fails the test. On
// net/http it is logged: net/http puts a connection back in its pool as soon as an
// answer's body ends, and only then does its read loop look at what
// follows; a request that takes the connection in between reads those
// bytes as its own answer: seen here now and then under -race on a
// loaded machine (two of ten runs of the cross-path test), never without.
// It is net/http's; keyhook keeps http1 from sharing it and sends https
// endpoints through http1 too, leaving net/http only what http1 does not
// do (see webhooks.ClientConfig.NetHTTPOnly).
func wrongAnswer(t *testing.T, netHTTP bool, format string, args ...any) {
	t.Helper()
	if netHTTP {
		t.Logf("net/http's pool race: "+format, args...)
		return
	}
	t.Errorf(format, args...)
}

// An endpoint that refuses a record and sends a 200 nobody asked for —
// behind the refusal's body, behind a chunked terminator, or later, on
// the idle connection — must not have the next record acked on it: bytes
// a request did not follow are no answer to it.
func TestBytesNobodyAskedForAreNoAnswer(t *testing.T) {
	for _, tc := range []struct {
		name string
		rp   reply
	}{
		{"200 behind a 503's body", reply{answer: refusal + forged}},
		// Read whole by the body's read, past the read buffer: what
		// follows stays below it (in the TLS layer, over TLS).
		{"200 behind a 503's long body", reply{answer: "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 10000\r\n\r\n" + strings.Repeat("n", 10000) + forged}},
		{"200 behind a chunked 503's terminator", reply{answer: "HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nnope\r\n0\r\n\r\n" + forged}},
		{"503, then a 200 on the idle connection", reply{answer: refusal, later: forged}},
	} {
		for _, tr := range transportsTLS {
			t.Run(tc.name+"/"+tr.name, func(t *testing.T) {
				ep := tr.serve(t, func(int, *http.Request) reply { return tc.rp })
				c := tr.client(t, ep, webhooks.ClientConfig{})
				logged := stdLog(t)
				defer func() {
					if !tr.netHTTP {
						if l := logged(); l != "" {
							t.Errorf("the http1 client wrote to the standard logger: %q", l)
						}
					} else if l := logged(); l != "" {
						lines := strings.Split(strings.TrimSpace(l), "\n")
						t.Logf("net/http wrote %d lines to the standard logger, the first: %.200q", len(lines), lines[0])
					}
				}()
				defer healthy(t, c)()
				for i := range 4 {
					a := send(c, ep.url("/hook"), "refused-"+strconv.Itoa(i), 1)
					if a.Status != http.StatusServiceUnavailable {
						wrongAnswer(t, tr.netHTTP, "record %d: status %d, body %q, err %v; the endpoint answered every request 503", i, a.Status, a.Body, a.Err)
					}
					if tc.rp.later != "" {
						<-ep.idle
						// net/http reads the idle connection on a goroutine
						// of its own, which nothing here can wait for.
						time.Sleep(20 * time.Millisecond)
					}
				}
			})
		}
	}
}

// Connections are pooled by host and port, across subscriptions: the
// leftovers of one path's answers must not become another path's.
func TestOneSubscriptionsLeftoversAreNotAnothersAnswer(t *testing.T) {
	for _, tr := range transportsTLS {
		t.Run(tr.name, func(t *testing.T) {
			ep := tr.serve(t, func(_ int, r *http.Request) reply {
				if r.URL.Path == "/good" {
					return reply{answer: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" + forged}
				}
				return reply{answer: refusal}
			})
			c := tr.client(t, ep, webhooks.ClientConfig{})
			acked := 0
			for i := range 10 {
				if a := send(c, ep.url("/good"), "good-"+strconv.Itoa(i), 1); a.Status != http.StatusOK || string(a.Body) != "ok" {
					wrongAnswer(t, tr.netHTTP, "/good record %d: status %d, body %q, err %v, want its own 200", i, a.Status, a.Body, a.Err)
				}
				if a := send(c, ep.url("/bad"), "bad-"+strconv.Itoa(i), 1); webhooks.Classify(a) == webhooks.OutcomeSuccess {
					acked++
				}
			}
			if acked > 0 {
				wrongAnswer(t, tr.netHTTP, "%d of 10 records /bad refused were acked", acked)
			}
		})
	}
}

// A head without end, one of 100 MiB, or informational answers without
// end fail the attempt once the head's bound is read, on both
// transports: not a 200 after a 100 MiB read, not a deadline's wait while
// memory grows.
func TestHeadAttacksEndWithinTheHeadBound(t *testing.T) {
	const hundredMiB = 100 << 20
	header := "X-Filler: " + strings.Repeat("a", 1000) + "\r\n"
	for _, tc := range []struct {
		name   string
		answer string
		stream func(w io.Writer) int64
	}{
		{"endless header", "HTTP/1.1 200 OK\r\n", endless(header, 0, "")},
		{"100 MiB header", "HTTP/1.1 200 OK\r\n", endless(header, hundredMiB, "\r\n")},
		{"endless 103s", "", endless("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n", 0, "")},
		{"endless header line", "HTTP/1.1 200 OK\r\nX-Filler: ", endless(strings.Repeat("a", 1000), 0, "")},
	} {
		for _, tr := range transportsTLS {
			t.Run(tc.name+"/"+tr.name, func(t *testing.T) {
				ep := tr.serve(t, func(int, *http.Request) reply { return reply{answer: tc.answer, stream: tc.stream} })
				c := tr.client(t, ep, webhooks.ClientConfig{Timeout: time.Minute})
				stop := healthy(t, c)
				a := send(c, ep.url("/hook"), "head", 1)
				stop()
				if a.Status != 0 || a.Err == nil || isTimeout(a) {
					t.Fatalf("attempt: status %d, err %v; want an error before the deadline", a.Status, a.Err)
				}
				if webhooks.Classify(a) != webhooks.OutcomeRetry {
					t.Errorf("attempt %v is %v, want retry", a.Err, webhooks.Classify(a))
				}
				if len(a.Err.Error()) > 600 {
					t.Errorf("error of %d bytes, want it bounded: %.200q...", len(a.Err.Error()), a.Err.Error())
				}
				t.Logf("err %v; the endpoint wrote %d KiB before the client hung up", a.Err, ep.streamed()>>10)
			})
		}
	}
}

// When a kept-alive connection breaks after the request went out and
// before any byte of an answer, the endpoint may have acted on it. The
// http1 client fails the attempt, and the retry policy sends it again
// under the next attempt number; net/http sends it again at once,
// because the request carries an Idempotency-Key (the delivery id) the
// endpoint can deduplicate on, so a connection the endpoint closed while
// idle does not cost an attempt.
func TestABrokenKeptAliveConnectionIsNoSilentResend(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			ep := serve(t, func(n int, _ *http.Request) reply {
				if n == 2 {
					return reply{close: true} // read, maybe acted on, never answered
				}
				return reply{answer: "HTTP/1.1 204 No Content\r\n\r\n"}
			})
			c := newClient(t, tr.netHTTP, webhooks.ClientConfig{})
			if a := send(c, ep.url("/hook"), "first", 1); a.Status != http.StatusNoContent {
				t.Fatalf("first record: status %d, err %v", a.Status, a.Err)
			}
			a := send(c, ep.url("/hook"), "second", 1)
			var second []seen
			for _, s := range ep.requests() {
				if s.id == "second" {
					second = append(second, s)
				}
			}
			if tr.netHTTP {
				if a.Status != http.StatusNoContent || len(second) != 2 {
					t.Errorf("net/http: status %d, err %v, %d requests; want the request replayed once, answered", a.Status, a.Err, len(second))
				}
				for _, s := range second {
					if s.idempotent != "second" || s.attempt != "1" {
						t.Errorf("replayed request: Idempotency-Key %q, attempt %q; want the delivery id and attempt 1", s.idempotent, s.attempt)
					}
				}
				return
			}
			if a.Err == nil || len(second) != 1 {
				t.Errorf("http1: status %d, err %v, %d requests; want a failed attempt and one request", a.Status, a.Err, len(second))
			}
			if webhooks.Classify(a) != webhooks.OutcomeRetry {
				t.Errorf("http1: the failed attempt is %v, want retry", webhooks.Classify(a))
			}
		})
	}
}

// A 2xx is acted on once its head is read: a body that never ends holds
// the key a short while, not the whole attempt timeout, and the
// connection it came on is not reused.
func TestABodyThatNeverEndsDoesNotHoldTheKey(t *testing.T) {
	for _, tc := range []struct{ name, answer string }{
		{"long Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\nabc"},
		{"chunked without its end", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n"},
		{"until close", "HTTP/1.0 200 OK\r\n\r\nabc"},
	} {
		for _, tr := range transportsTLS {
			t.Run(tc.name+"/"+tr.name, func(t *testing.T) {
				ep := tr.serve(t, func(n int, _ *http.Request) reply {
					if n == 1 {
						return reply{answer: tc.answer, hang: true}
					}
					return reply{answer: "HTTP/1.1 204 No Content\r\n\r\n"}
				})
				const timeout = time.Minute
				c := tr.client(t, ep, webhooks.ClientConfig{Timeout: timeout})
				a := send(c, ep.url("/hook"), "slow-body", 1)
				if a.Status != http.StatusOK || a.Err != nil {
					t.Fatalf("status %d, err %v, want 200", a.Status, a.Err)
				}
				if a.Duration >= timeout/4 {
					t.Errorf("the attempt took %v of its %v for a body of diagnostics", a.Duration, timeout)
				}
				if a := send(c, ep.url("/hook"), "next", 1); a.Status != http.StatusNoContent {
					t.Errorf("next record: status %d, err %v, want its own 204", a.Status, a.Err)
				}
			})
		}
	}
}

// A status outside 100-599 is no HTTP status: both transports report a
// malformed answer, retried, so the metrics' class ("error") and the
// dead letter's status (0) agree.
func TestStatusesOutsideHTTPsRangeAreMalformedAnswers(t *testing.T) {
	for _, status := range []string{"600", "999", "099", "000"} {
		for _, tr := range transports {
			t.Run(status+"/"+tr.name, func(t *testing.T) {
				ep := serve(t, func(int, *http.Request) reply {
					return reply{answer: "HTTP/1.1 " + status + " Odd\r\nContent-Length: 0\r\n\r\n"}
				})
				c := newClient(t, tr.netHTTP, webhooks.ClientConfig{})
				a := send(c, ep.url("/hook"), "odd", 1)
				if a.Status != 0 || a.Err == nil || !strings.Contains(a.Err.Error(), "malformed HTTP status code") {
					t.Errorf("status %d, err %v; want status 0 and a malformed status code", a.Status, a.Err)
				}
				if webhooks.Classify(a) != webhooks.OutcomeRetry {
					t.Errorf("outcome %v, want retry", webhooks.Classify(a))
				}
			})
		}
	}
}

// An answer cut short by the attempt's deadline is a timeout, whatever
// the reader made of the half line it got: a status line stopped after
// "HTTP/1.1 " read as a malformed status code "" on the http1 client.
func TestAnAnswerCutByTheDeadlineIsATimeout(t *testing.T) {
	for _, partial := range []string{"HTTP/1.1 ", "HTTP/1.1 20", "HTTP/1.1 200 OK\r\nX-Half: yes"} {
		for _, tr := range transports {
			t.Run(strconv.Quote(partial)+"/"+tr.name, func(t *testing.T) {
				ep := serve(t, func(int, *http.Request) reply { return reply{answer: partial, hang: true} })
				c := newClient(t, tr.netHTTP, webhooks.ClientConfig{Timeout: 300 * time.Millisecond})
				if a := send(c, ep.url("/hook"), "cut", 1); a.Status != 0 || !isTimeout(a) {
					t.Errorf("status %d, err %v; want a timeout", a.Status, a.Err)
				}
			})
		}
	}
}

// stdLog sends the standard logger's output to a buffer until the test
// ends and returns what it received so far.
func stdLog(t *testing.T) func() string {
	t.Helper()
	var mu sync.Mutex
	var b strings.Builder
	prev := log.Writer()
	log.SetOutput(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return b.Write(p)
	}))
	t.Cleanup(func() { log.SetOutput(prev) })
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		return b.String()
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
