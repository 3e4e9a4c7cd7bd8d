package dispatcher

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Allocation budgets of one delivery, measured as the benchmarks of
// delivery_bench_test.go measure them. A change that goes over one is a
// regression of the per-record cost, not noise: allocation counts do not
// depend on the machine's load.
const (
	// maxAllocsPerDelivery covers keyhook's own work: render, span,
	// metrics, retry budget, result (the sender answers at once), for a
	// record carrying a trace context (11).
	maxAllocsPerDelivery = 12
	// maxAllocsPerSentDelivery adds the webhooks client and its http1
	// client, signing the request and sending it over a kept-alive
	// connection to a sink that allocates nothing, two partitions taking
	// turns on it (15; 13 when consecutive requests share a partition's
	// context and the connection keeps its watch). It was 75 through
	// net/http's client, 27 before attempts recycled their call and
	// header map and before the trace context was written once.
	maxAllocsPerSentDelivery = 15
	// A record without trace context costs no context either: with the
	// no-op tracer provider (telemetry without a traces exporter) neither
	// the delivery nor its attempt opens a span.
	maxAllocsPerUntracedDelivery     = 8
	maxAllocsPerUntracedSentDelivery = 11
)

func TestDeliveryAllocationsStayWithinBudget(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; scripts/test.sh runs this test again without -race")
	}
	traced := benchRecord()
	untraced := benchRecord()
	untraced.Headers = nil
	tests := []struct {
		name string
		max  float64
		url  func(testing.TB) string
		okay bool // okSender instead of a real client
		rec  *kgo.Record
	}{
		{name: "keyhook's own work", max: maxAllocsPerDelivery, okay: true, rec: traced},
		{name: "keyhook's own work, no trace context", max: maxAllocsPerUntracedDelivery, okay: true, rec: untraced},
		{name: "sent over a kept-alive connection", max: maxAllocsPerSentDelivery, url: startRawSink, rec: traced},
		{name: "sent, no trace context", max: maxAllocsPerUntracedSentDelivery, url: startRawSink, rec: untraced},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := "http://example.com/"
			if tt.url != nil {
				url = tt.url(t)
			}
			g, w := benchGroup(t, url)
			if tt.okay {
				g.n.sender = okSender{}
			}
			// Two partitions take turns on the one connection, each under
			// its own cancellable context, as a node's partitions share an
			// endpoint's connections: the connection changes the context
			// it watches at every request.
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			workers := []*worker{w, {g: g, attemptCtx: ctx, deliverCtx: ctx}}
			turn := 0
			deliver := func() {
				w := workers[turn%len(workers)]
				turn++
				f := g.newFlight(w, tt.rec, nil)
				if _, done := f.step(); !done || !f.acked {
					t.Fatalf("delivery not acked: %+v", f.last)
				}
				w.mail.results = w.mail.results[:0]
			}
			deliver() // the connection and the caches, once
			got := testing.AllocsPerRun(200, deliver)
			t.Logf("%v allocations per delivery", got)
			if got > tt.max {
				t.Errorf("%v allocations per delivery, want at most %v", got, tt.max)
			}
		})
	}
}
