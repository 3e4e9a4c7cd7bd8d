package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/webhooks"
)

// The ceilings of the load phase: the same fan-out made by a client that
// only sends the requests, on the same machine, in the same run. Each
// record of the load phase is a burst of one request per subscription,
// all at once, and a sink in this process answers them; on a machine of
// two cores the requests of a burst wait for a core as much as for the
// sink. So "the endpoint's latency" of issue 29's target (fan-out p99 ≤
// the endpoint's latency + 250 ms) is not zero here, and what a client
// that only sends the requests reaches is the figure keyhook's p99 is
// set against, as the main bench sets keyhook's rate against ceiling A
// and wrk. Two clients, one after the other, each for -ceiling-for at the
// load phase's rate, a goroutine per request as keyhook has, connections
// kept alive, to a sink of its own:
//   - ceiling A: keyhook's own HTTP client (webhooks.Client), each request
//     built and signed as keyhook builds a delivery;
//   - Go's net/http client, a client keyhook does not use, sending the
//     headers keyhook sent.
//
// Nothing else works meanwhile: no record is produced, read or tracked,
// and the nodes are idle.

// ceilingClient sends one request of a burst: to subscription sub's path,
// body the record's value; nil once answered 2xx.
type ceilingClient struct {
	// name titles its table; file names its -latencies CSV.
	name, file string
	// target: its p99 is the endpoint's latency of issue 29's target.
	target bool
	send   func(ctx context.Context, sub, seq, key int, body string) error
	close  func()
}

func (b *bench) ceilingPhase(ctx context.Context) error {
	clients := []func(*sink) (ceilingClient, error){b.keyhookClient, b.netHTTPClient}
	for _, build := range clients {
		s, err := newSink(b.c.subs, b.c.keys)
		if err != nil {
			return err
		}
		err = b.ceiling(ctx, s, build)
		s.close()
		if err != nil {
			return err
		}
	}
	return nil
}

// ceiling measures the client build makes, sending to s.
func (b *bench) ceiling(ctx context.Context, s *sink, build func(*sink) (ceilingClient, error)) error {
	c, err := build(s)
	if err != nil {
		return err
	}
	defer c.close()
	f := &fanner{c: c, sink: s, subs: b.c.subs}
	// A burst not measured first: it opens the connections, as the
	// nodes' warm-up opened theirs.
	_, first := f.burst(ctx)
	first.Wait()
	if n := f.failed.Load(); n > 0 {
		return fmt.Errorf("ceiling %s: %d of %d requests of the first burst failed", c.name, n, b.c.subs)
	}
	time.Sleep(scrapeSettle)
	share, err := startMachineShare(b.nodes, b.brokerPort, b.c.redisURL)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fanout: the machine's share not measured: %v\n", err)
	}
	from, to := f.run(ctx, b.c.rate, b.c.ceilingFor)
	machine := share.finish()
	lat, complete := fanoutLatencyOf(s, b.all(), from, to)
	if b.c.latencies != "" {
		ext := filepath.Ext(b.c.latencies)
		path := strings.TrimSuffix(b.c.latencies, ext) + "." + c.file + ext
		if err := writeLatenciesOf(s, path, b.all(), from, to); err != nil {
			return err
		}
	}
	b.printCeiling(c.name, lat, f.failed.Load(), s.acceptErrs.Load(), to-from, complete, c.target)
	b.printMachineShare(machine, c.name+" ran", "machine busy under "+c.name)
	return nil
}

// printCeiling prints a ceiling's table, against the load phase's p99.
// target: this ceiling sets the endpoint's latency of issue 29's target.
func (b *bench) printCeiling(name string, lat []time.Duration, failed, acceptErrs int64, records, complete int, target bool) {
	fmt.Printf("\n## %s: the load's fan-out without keyhook (%g bursts/s of %d requests for %v; no Kafka, no Redis, the nodes idle)\n\n",
		name, b.c.rate, b.c.subs, b.c.ceilingFor)
	fmt.Println("| | value | |")
	fmt.Println("|---|---|---|")
	p50, p99 := pct(lat, 0.5), pct(lat, 0.99)
	fmt.Printf("| fan-out latency p50 (burst → last of %d) | %v | |\n", b.c.subs, p50)
	fmt.Printf("| fan-out latency p99 | %v | |\n", p99)
	fmt.Printf("| fan-out latency max | %v | |\n", pct(lat, 1))
	fmt.Printf("| bursts answered by every subscription | %d of %d | %s |\n", complete, records, verdict(complete == records))
	fmt.Printf("| requests failed | %d | %s |\n", failed, verdict(failed == 0))
	fmt.Printf("| connections the sink failed to accept (this process out of file descriptors) | %d | %s |\n", acceptErrs, verdict(acceptErrs == 0))
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.record(name+" fan-out p99", "ms", ms(p99))
	if b.loadP99 <= 0 || p99 <= 0 {
		return
	}
	over := b.loadP99 - p99
	fmt.Printf("| keyhook's fan-out p99 (load above) ÷ this p99 | %.2f | |\n", float64(b.loadP99)/float64(p99))
	if !target {
		fmt.Printf("| keyhook's fan-out p99 − this p99 | %v | |\n", over.Round(time.Millisecond))
		return
	}
	// Issue 29's target, the endpoint's latency taken as what a burst of
	// its requests takes here without keyhook; a ceiling that lost
	// requests measured nothing.
	fmt.Printf("| keyhook's fan-out p99 − this p99 | %v | ≤ 250ms (the endpoint's latency + 250 ms): %s |\n",
		over.Round(time.Millisecond), verdict(complete == records && failed == 0 && acceptErrs == 0 && over <= 250*time.Millisecond))
	b.record("fan-out p99 − ceiling A's", "ms", ms(over))
}

// keyhookClient is ceiling A: keyhook's HTTP client, built as the main
// bench's ceiling A builds it, each request a raw delivery of one
// subscription's, signed.
func (b *bench) keyhookClient(s *sink) (ceilingClient, error) {
	limiters, err := webhooks.NewLimiters(webhooks.LimiterConfig{})
	if err != nil {
		return ceilingClient{}, err
	}
	cl, err := webhooks.NewClient(webhooks.ClientConfig{Policy: webhooks.AddressPolicy{AllowPrivate: true}, Limiters: limiters})
	if err != nil {
		return ceilingClient{}, err
	}
	sub := &subscription.Subscription{ID: "ceiling", Name: "ceiling", Topics: []string{b.topic},
		Endpoint: subscription.Endpoint{URL: s.url + "/s/0"}, Version: 1}
	sub.Normalize()
	if err := sub.EnsureSigningSecret(time.Now()); err != nil {
		return ceilingClient{}, err
	}
	if errs := sub.Validate(); len(errs) > 0 {
		return ceilingClient{}, fmt.Errorf("ceiling subscription: %v", errs)
	}
	signer := sub.Signer(time.Now())
	// One attempt: a failure is counted, not retried.
	policy := sub.Retry.Policy(webhooks.RetryPolicy{})
	policy.MaxAttempts = 1
	urls := make([]string, b.c.subs)
	for i := range urls {
		urls[i] = s.url + "/s/" + strconv.Itoa(i)
	}
	source := "kafka://" + b.topic
	send := func(ctx context.Context, sub, seq, key int, body string) error {
		now := time.Now()
		offset := strconv.Itoa(seq)
		m := &webhooks.Message{
			ID:      dispatcher.DeliveryID("ceiling-"+strconv.Itoa(sub), b.topic, 0, int64(seq)),
			Key:     []byte("k" + strconv.Itoa(key)),
			Value:   []byte(body),
			Time:    now,
			Source:  source,
			Subject: "0/" + offset,
			Attributes: []webhooks.Attr{
				{Name: "subscription", Value: "ceiling"}, {Name: "topic", Value: b.topic},
				{Name: "partition", Value: "0"}, {Name: "offset", Value: offset},
			},
		}
		req, err := webhooks.NewRequest(urls[sub], webhooks.FormatRaw, m, "")
		if err != nil {
			return err
		}
		req.Signer = signer
		if res := cl.Deliver(ctx, req, policy, nil); res.Outcome != webhooks.OutcomeSuccess {
			return fmt.Errorf("ceiling A: %v", res.Err)
		}
		return nil
	}
	return ceilingClient{name: "ceiling A (keyhook's HTTP client)", file: "ceiling-a", target: true, send: send, close: cl.CloseIdleConnections}, nil
}

// netHTTPClient is Go's net/http client, sending the headers keyhook sent.
func (b *bench) netHTTPClient(s *sink) (ceilingClient, error) {
	// Idle connections are kept for every request of a few bursts at
	// once: with fewer, a burst's requests close what the last one opened
	// and dial again, as keyhook's client never does.
	tr := &http.Transport{MaxIdleConnsPerHost: 4 * b.c.subs, IdleConnTimeout: time.Minute, DisableCompression: true}
	cl := &http.Client{Transport: tr, Timeout: b.c.drain}
	header := requestHeader(b.sink.header.Load())
	send := func(ctx context.Context, sub, _, _ int, body string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/s/"+strconv.Itoa(sub), strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header = header.Clone()
		resp, err := cl.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("net/http: %s", resp.Status)
		}
		return nil
	}
	return ceilingClient{name: "Go's net/http client", file: "net-http", send: send, close: tr.CloseIdleConnections}, nil
}

// requestHeader is the header keyhook sent (h, as the sink read it), to
// send as it was: Go's client sets Host, Content-Length and
// Accept-Encoding itself. Without one, the content type only.
func requestHeader(h *http.Header) http.Header {
	out := http.Header{}
	if h == nil {
		out.Set("Content-Type", "application/octet-stream")
		return out
	}
	for k, v := range *h {
		switch k {
		case "Content-Length", "Host", "Accept-Encoding", "Connection":
			continue
		}
		out[k] = v
	}
	return out
}

// fanner sends bursts: a request per subscription, each on a goroutine of
// its own, the body "<seq> <burst time>" as the producer's records carry.
type fanner struct {
	c      ceilingClient
	sink   *sink
	subs   int
	failed atomic.Int64
}

// run sends rate bursts a second for d and returns the sequence numbers
// [from, to) of the bursts once each request was answered.
func (f *fanner) run(ctx context.Context, rate float64, d time.Duration) (from, to int) {
	var all sync.WaitGroup
	from, to = paced(ctx, rate, d, func() int {
		seq, wg := f.burst(ctx)
		all.Go(wg.Wait)
		return seq
	})
	all.Wait()
	return from, to
}

// burst sends one burst: its sequence number, and a group done once each
// request was answered.
func (f *fanner) burst(ctx context.Context) (int, *sync.WaitGroup) {
	now := time.Now().UnixNano()
	seq, key := f.sink.register(now)
	body := strconv.Itoa(seq) + " " + strconv.FormatInt(now, 10)
	wg := &sync.WaitGroup{}
	for i := range f.subs {
		wg.Go(func() {
			if err := f.c.send(ctx, i, seq, key, body); err != nil {
				f.failed.Add(1)
			}
		})
	}
	return seq, wg
}
