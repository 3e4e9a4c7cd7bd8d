package webhooks_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/keyhook/keyhook/webhooks"
)

// Every connection a busy endpoint needs is kept alive between requests:
// once 400 concurrent senders have their connections, 10,000 more
// deliveries dial (almost) none. A per-host idle cap below the concurrency
// made the client close connections as they came back and dial again.
func TestConcurrentDeliveriesKeepTheirConnections(t *testing.T) {
	var dials atomic.Int64
	ep := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(2 * time.Millisecond) // keep the senders' requests in flight together
		w.WriteHeader(http.StatusNoContent)
	}))
	ep.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dials.Add(1)
		}
	}
	ep.Start()
	t.Cleanup(ep.Close)
	c := newClient(t, webhooks.ClientConfig{})

	const senders, each = 400, 25
	run := func(n int) {
		var wg sync.WaitGroup
		var failed atomic.Int64
		for range senders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range n {
					if a := c.Send(context.Background(), &webhooks.Request{URL: ep.URL, Body: []byte("{}")}, 1); a.Status != http.StatusNoContent {
						failed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if f := failed.Load(); f != 0 {
			t.Fatalf("%d of %d deliveries failed", f, senders*n)
		}
	}
	run(2) // every sender gets its connection
	warm := dials.Load()
	run(each)
	again := dials.Load() - warm
	t.Logf("warm-up dialled %d connections; then %d deliveries from %d senders dialled %d more", warm, senders*each, senders, again)
	if again > senders/20 {
		t.Errorf("%d new connections for %d deliveries once %d were open, want at most %d: connections are closed and dialled again", again, senders*each, warm, senders/20)
	}
}

// Attempts reuse what the client built for earlier ones (a call and its
// header map), so each request must carry its own headers and nothing of
// another's: 64 senders, each request with its own trace, id, attempt and
// caller header, every other one signed. A signature, a trace context or a
// caller header left over from a recycled attempt, or one attempt's
// values written into another's while both are in flight, fails here.
func TestConcurrentAttemptsCarryOnlyTheirOwnHeaders(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	prop := propagation.TraceContext{}
	var checked atomic.Int64
	var mu sync.Mutex
	var problems []string
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(problems) < 10 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	ep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		n, err := strconv.Atoi(string(body))
		if err != nil {
			fail("body %q", body)
			return
		}
		if got, want := r.Header.Get("Webhook-Id"), fmt.Sprintf("msg_%d", n); got != want {
			fail("request %d: webhook-id %q, want %q", n, got, want)
		}
		if got, want := r.Header.Get("Keyhook-Attempt"), strconv.Itoa(1+n%3); got != want {
			fail("request %d: attempt %q, want %q", n, got, want)
		}
		if got := r.Header.Values("X-Request"); len(got) != 1 || got[0] != string(body) {
			fail("request %d: X-Request %q", n, got)
		}
		if n%5 == 0 && r.Header.Get("X-Fifth") != "yes" || n%5 != 0 && r.Header.Get("X-Fifth") != "" {
			fail("request %d: X-Fifth %q", n, r.Header.Get("X-Fifth"))
		}
		sc := trace.SpanContextFromContext(prop.Extract(context.Background(), propagation.HeaderCarrier(r.Header)))
		if sc.TraceID() != traceOf(n) || len(r.Header.Values("Traceparent")) != 1 {
			fail("request %d: traceparent %q", n, r.Header.Values("Traceparent"))
		}
		signed := n%2 == 0
		switch {
		case signed:
			if err := wh.Verify(body, r.Header); err != nil {
				fail("request %d: signature: %v", n, err)
			}
		case r.Header.Get("Webhook-Signature") != "" || r.Header.Get("Webhook-Timestamp") != "":
			fail("request %d, unsigned, carries a signature", n)
		}
		checked.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(ep.Close)
	c := newClient(t, webhooks.ClientConfig{})
	signer := &webhooks.Signer{Secrets: []webhooks.Secret{mustSecret(t, secret)}}

	const senders, each = 64, 40
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range each {
				n := s*each + i
				r := &webhooks.Request{URL: ep.URL, Body: []byte(strconv.Itoa(n)), DeliveryID: fmt.Sprintf("msg_%d", n),
					Header: http.Header{"X-Request": {strconv.Itoa(n)}}}
				if n%5 == 0 {
					r.Header.Set("X-Fifth", "yes")
				}
				if n%2 == 0 {
					r.Signer = signer
				}
				ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
					TraceID: traceOf(n), SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled}))
				if a := c.Send(ctx, r, 1+n%3); a.Status != http.StatusNoContent {
					fail("request %d: status %d, err %v", n, a.Status, a.Err)
				}
			}
		})
	}
	wg.Wait()
	for _, p := range problems {
		t.Error(p)
	}
	if got := checked.Load(); got != senders*each {
		t.Errorf("%d requests checked, want %d", got, senders*each)
	}
}

// traceOf is a trace id of its own for request n.
func traceOf(n int) trace.TraceID {
	var id trace.TraceID
	binary.BigEndian.PutUint64(id[8:], uint64(n)+1)
	return id
}
