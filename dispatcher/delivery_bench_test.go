package dispatcher

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/keyhook/keyhook/delivery"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/webhooks"
)

// BenchmarkDelivery measures one whole delivery as a node makes it:
// the request rendered and signed, sent by the node's client (limiters
// on, metrics on, tracing off) over a kept-alive connection, and its
// result handed back to the worker. Its allocs/op is the figure to keep
// down. Against the raw sink, which answers without allocating, every
// allocation counted is keyhook's or net/http's client side; against an
// httptest server the server's own are counted too.
func BenchmarkDelivery(b *testing.B) {
	for _, sink := range []string{"raw", "httptest"} {
		b.Run("sink="+sink, func(b *testing.B) {
			var url string
			switch sink {
			case "raw":
				url = startRawSink(b)
			default:
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.Copy(io.Discard, r.Body)
					w.WriteHeader(http.StatusNoContent)
				}))
				b.Cleanup(srv.Close)
				url = srv.URL
			}
			g, w := benchGroup(b, url)
			rec := benchRecord()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				f := g.newFlight(w, rec, nil)
				if _, done := f.step(); !done || !f.acked {
					b.Fatalf("delivery not acked: %+v", f.last)
				}
				w.mail.results = w.mail.results[:0]
			}
		})
	}
}

// benchGroup is a group delivering to url as app.Build wires a node:
// a signing subscription, a client with limiters, metrics recorded.
func benchGroup(tb testing.TB, url string) (*group, *worker) {
	tb.Helper()
	limiters, err := webhooks.NewLimiters(webhooks.LimiterConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	// Telemetry as cmd/keyhook wires it without a traces exporter: the
	// no-op tracer provider, given to the client too.
	client, err := webhooks.NewClient(webhooks.ClientConfig{Policy: webhooks.AddressPolicy{AllowPrivate: true}, Limiters: limiters,
		TracerProvider: tracenoop.NewTracerProvider()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(client.CloseIdleConnections)
	cfg := Config{NodeID: "bench", Brokers: []string{"127.0.0.1:1"}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))}
	n, err := New(cfg, noSubs{}, client, noTracker{})
	if err != nil {
		tb.Fatal(err)
	}
	sub := &subscription.Subscription{ID: "sub_bench", Topics: []string{"t"}, Endpoint: subscription.Endpoint{URL: url}, Version: 1}
	sub.Normalize()
	if err := sub.EnsureSigningSecret(time.Now()); err != nil {
		tb.Fatal(err)
	}
	g := &group{n: n, sub: sub, log: n.log, ep: delivery.New(sub, n.cfg.Retry)}
	g.initTelemetry()
	// Cancellable, as a worker's are: an attempt then watches for the
	// cancellation.
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	return g, &worker{g: g, attemptCtx: ctx, deliverCtx: ctx}
}

func benchRecord() *kgo.Record {
	return &kgo.Record{
		Topic: "t", Partition: 3, Offset: 12345, Key: []byte("customer-42"),
		Value: bytes.Repeat([]byte("x"), 256), Timestamp: time.Now(),
		Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")}},
	}
}

// startRawSink serves HTTP/1.1 keep-alive POSTs with 204 and allocates
// nothing per request, so a benchmark's allocations are the client's.
func startRawSink(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	tb.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			wg.Go(func() { serveRaw(c) })
		}
	})
	return "http://" + ln.Addr().String() + "/hook"
}

var noContent = []byte("HTTP/1.1 204 No Content\r\n\r\n")

func serveRaw(c net.Conn) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 64<<10)
	contentLength := []byte("content-length:")
	for {
		n := 0
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				return
			}
			line = bytes.TrimRight(line, "\r\n")
			if len(line) == 0 {
				break
			}
			if len(line) > len(contentLength) && bytes.EqualFold(line[:len(contentLength)], contentLength) {
				for _, d := range bytes.TrimSpace(line[len(contentLength):]) {
					n = n*10 + int(d-'0')
				}
			}
		}
		if _, err := br.Discard(n); err != nil {
			return
		}
		if _, err := c.Write(noContent); err != nil {
			return
		}
	}
}
