package webhooks_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
