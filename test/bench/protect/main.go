// Command protect measures the endpoint protections of issue 31 in one
// process: dispatcher nodes over an in-process Kafka (kfake), a real
// redis-server, and a real HTTP endpoint that records every request.
//
//   - ratelimit: 3 nodes, one subscription with rate_limit per_second 50
//     over 12 partitions and 500 keys, a backlog of 3,000 records: the
//     requests the endpoint sees in each one-second window (the max of the
//     windows after the first, the mean over the full windows, their ratio
//     to the limit), and whether every record came once, in key order.
//
//   - breaker: one node, 1,000 keys with a record each behind an endpoint
//     that answers 503 for -outage, then 200; run with breakers off and on:
//     the requests the endpoint got during the outage, the first 2xx and
//     the last delivery after it recovered, attempts per record.
//
//     go run ./test/bench/protect              # both, about three minutes
//     go run ./test/bench/protect -run breaker -outage 60s
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/breaker"
	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/ratelimit"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
	"github.com/keyhook/keyhook/webhooks"
)

func main() {
	run := flag.String("run", "ratelimit,breaker", "scenarios to run")
	outage := flag.Duration("outage", 20*time.Second, "how long the endpoint is down in the breaker scenario")
	interval := flag.Duration("interval", 5*time.Second, "--breaker-interval in the breaker scenario")
	flag.Parse()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	rdb, stop, err := startRedis()
	if err != nil {
		fail(err)
	}
	defer stop()
	if strings.Contains(*run, "ratelimit") {
		if err := rateLimit(rdb); err != nil {
			fail(err)
		}
	}
	if strings.Contains(*run, "breaker") {
		for _, failures := range []int{0, 10} {
			if err := breakerRun(rdb, failures, *outage, *interval); err != nil {
				fail(err)
			}
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "protect:", err)
	os.Exit(1)
}

// rateLimit is scenario (a).
func rateLimit(rdb *redis.Client) error {
	const partitions, keys, records, rate, nodes = 12, 500, 3000, 50, 3
	brokers, closeKafka, err := kafka(partitions, "limited")
	if err != nil {
		return err
	}
	defer closeKafka()
	sink := newSink(nil)
	defer sink.close()
	if err := produce(brokers, "limited", records, keys, partitions); err != nil {
		return err
	}
	sub := newSub("limited", "limited", sink.url)
	sub.RateLimit = subscription.RateLimit{PerSecond: rate}
	tokens, err := ratelimit.New(rdb, "bench-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	if err != nil {
		return err
	}
	start := time.Now()
	var stops []func()
	for i := range nodes {
		stop, err := startNode(brokers, rdb, sub, fmt.Sprintf("node-%d", i), func(c *dispatcher.Config) { c.RateTokens = tokens })
		if err != nil {
			return err
		}
		stops = append(stops, stop)
	}
	defer func() {
		for _, s := range stops {
			s()
		}
	}()
	if err := sink.waitAcked(records, 3*time.Minute); err != nil {
		return err
	}
	took := time.Since(start)
	w := sink.windows()
	full := w[1 : len(w)-1] // the first and the last window are partial
	peak, sum := 0, 0
	for _, c := range full {
		peak = max(peak, c)
		sum += c
	}
	mean := float64(sum) / float64(len(full))
	fmt.Printf("ratelimit: %d nodes, per_second %d (burst %d), %d partitions, %d keys, %d records, kfake\n",
		nodes, rate, sub.RateLimit.BurstOrDefault(), partitions, keys, records)
	fmt.Printf("  windows: %v\n", w)
	fmt.Printf("  first window %d; after it: max %d (%.2f × the limit), mean %.2f/s over %d full windows (%.3f × the limit)\n",
		w[0], peak, float64(peak)/rate, mean, len(full), mean/rate)
	fmt.Printf("  delivered %d of %d in %v; duplicates %d; key order violations %d\n",
		sink.acked(), records, took.Round(time.Millisecond), sink.duplicates(), len(sink.orderViolations()))
	return nil
}

// breakerRun is scenario (b) with --breaker-failures failures (0: off).
func breakerRun(rdb *redis.Client, failures int, outage, interval time.Duration) error {
	const keys = 1000
	topic := fmt.Sprintf("down-%d", failures)
	brokers, closeKafka, err := kafka(1, topic)
	if err != nil {
		return err
	}
	defer closeKafka()
	var upAt atomic.Int64
	sink := newSink(func() int {
		if upAt.Load() != 0 {
			return http.StatusOK
		}
		return http.StatusServiceUnavailable
	})
	defer sink.close()
	if err := produce(brokers, topic, keys, keys, 1); err != nil {
		return err
	}
	sub := newSub(topic, topic, sink.url)
	sub.MaxInFlight = 64
	start := time.Now()
	var opened atomic.Int64
	stop, err := startNode(brokers, rdb, sub, "node-b", func(c *dispatcher.Config) {
		c.BreakerFailures, c.BreakerInterval = failures, interval
		c.OnBreakerTransition = func(tr breaker.Transition) {
			if tr.To == breaker.Open {
				opened.CompareAndSwap(0, tr.At.UnixNano())
			}
		}
	})
	if err != nil {
		return err
	}
	defer stop()
	time.Sleep(outage)
	during := sink.requests()
	recovered := time.Now()
	// Requests started once the breaker first opened: the probes (those
	// in flight when it opened started before).
	afterOpen := 0
	var when []string
	if at := opened.Load(); at != 0 {
		for _, r := range sink.snapshot() {
			if r.start.UnixNano() > at && r.start.Before(recovered) {
				afterOpen++
				when = append(when, r.start.Sub(time.Unix(0, at)).Round(time.Millisecond).String())
			}
		}
	}
	upAt.Store(recovered.UnixNano())
	if err := sink.waitAcked(keys, 5*time.Minute); err != nil {
		return err
	}
	first, last := sink.okSpan()
	mode := "off"
	if failures > 0 {
		mode = fmt.Sprintf("on (--breaker-failures %d --breaker-interval %v)", failures, interval)
	}
	fmt.Printf("breaker %s: %d keys, endpoint down %v from the start\n", mode, keys, outage)
	if at := opened.Load(); at != 0 {
		fmt.Printf("  opened %v into the outage; %d requests started from then until the recovery, at +%s after it opened (attempts let through before it opened, then one probe per interval)\n",
			time.Unix(0, at).Sub(start).Round(time.Millisecond), afterOpen, strings.Join(when, ", +"))
	}
	fmt.Printf("  requests during the outage: %d (%.1f/s); after recovery: first 2xx in %v, all %d delivered in %v; %d requests in all, at most %d attempts for one record; duplicates %d\n",
		during, float64(during)/recovered.Sub(start).Seconds(), first.Sub(recovered).Round(time.Millisecond), keys,
		last.Sub(recovered).Round(time.Millisecond), sink.requests(), sink.maxAttempt(), sink.duplicates())
	return nil
}

func newSub(id, topic, url string) *subscription.Subscription {
	s := &subscription.Subscription{ID: id, Name: id, Topics: []string{topic}, Endpoint: subscription.Endpoint{URL: url},
		Ordering: subscription.OrderKey, MaxInFlight: 256, Version: 1, DeadLetterTopic: subscription.DeadLetterNone}
	s.Normalize()
	return s
}

type staticSubs []*subscription.Subscription

func (s staticSubs) Watch(ctx context.Context, _ time.Duration, fn func([]*subscription.Subscription)) error {
	fn(s)
	<-ctx.Done()
	return nil
}

func startNode(brokers []string, rdb *redis.Client, sub *subscription.Subscription, id string, mod func(*dispatcher.Config)) (func(), error) {
	tracker, err := tracking.New(rdb, tracking.Config{})
	if err != nil {
		return nil, err
	}
	cfg := dispatcher.Config{NodeID: id, Brokers: brokers, Tuning: dispatcher.Tuning{SessionTimeout: 6 * time.Second}}
	mod(&cfg)
	sender, err := webhooks.NewClient(webhooks.ClientConfig{Policy: webhooks.AddressPolicy{AllowPrivate: true}})
	if err != nil {
		return nil, err
	}
	n, err := dispatcher.New(cfg, staticSubs{sub}, sender, tracker)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = n.Run(ctx)
	}()
	return func() { cancel(); <-done }, nil
}

func kafka(partitions int32, topics ...string) ([]string, func(), error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topics...))
	if err != nil {
		return nil, nil, err
	}
	return c.ListenAddrs(), c.Close, nil
}

// produce writes n records over keys keys, key i%keys in partition
// (i%keys)%partitions, so a key's records share a partition.
func produce(brokers []string, topic string, n, keys, partitions int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer cl.Close()
	var rs []*kgo.Record
	for i := range n {
		k := i % keys
		rs = append(rs, &kgo.Record{Topic: topic, Partition: int32(k % partitions), Key: fmt.Appendf(nil, "k%d", k), Value: fmt.Appendf(nil, "v%d", i)})
	}
	return cl.ProduceSync(context.Background(), rs...).FirstErr()
}

// startRedis starts a redis-server on a free port.
func startRedis() (*redis.Client, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "protect-redis-")
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start redis-server: %w", err)
	}
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
		}
	}()
	rdb := redis.NewClient(&redis.Options{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))})
	for range 50 {
		if rdb.Ping(context.Background()).Err() == nil {
			return rdb, func() { rdb.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait(); os.RemoveAll(dir) }, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, nil, fmt.Errorf("redis-server did not answer")
}

// request is one request the sink answered.
type request struct {
	key        string
	partition  int32
	offset     int64
	attempt    int
	status     int
	start, end time.Time
}

// sink is the endpoint: it records every request and answers status().
type sink struct {
	srv    *httptest.Server
	url    string
	status func() int

	mu   sync.Mutex
	reqs []request
}

func newSink(status func() int) *sink {
	s := &sink{status: status}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.url = s.srv.URL
	return s
}

func (s *sink) close() { s.srv.Close() }

func (s *sink) serve(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	start := time.Now()
	p, _ := strconv.ParseInt(r.Header.Get("Keyhook-Partition"), 10, 32)
	off, _ := strconv.ParseInt(r.Header.Get("Keyhook-Offset"), 10, 64)
	attempt, _ := strconv.Atoi(r.Header.Get("Keyhook-Attempt"))
	status := http.StatusOK
	if s.status != nil {
		status = s.status()
	}
	s.mu.Lock()
	s.reqs = append(s.reqs, request{key: r.Header.Get("Keyhook-Key"), partition: int32(p), offset: off, attempt: attempt, status: status, start: start, end: time.Now()})
	s.mu.Unlock()
	w.WriteHeader(status)
}

func (s *sink) snapshot() []request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]request(nil), s.reqs...)
}

func (s *sink) requests() int { return len(s.snapshot()) }

func (s *sink) acked() int {
	seen := make(map[[2]int64]bool)
	for _, r := range s.snapshot() {
		if r.status == http.StatusOK {
			seen[[2]int64{int64(r.partition), r.offset}] = true
		}
	}
	return len(seen)
}

func (s *sink) duplicates() int {
	seen := make(map[[2]int64]int)
	d := 0
	for _, r := range s.snapshot() {
		if r.status == http.StatusOK {
			if seen[[2]int64{int64(r.partition), r.offset}]++; seen[[2]int64{int64(r.partition), r.offset}] > 1 {
				d++
			}
		}
	}
	return d
}

func (s *sink) waitAcked(n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for s.acked() < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d records delivered within %v", s.acked(), n, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// windows counts the 2xx requests in each second from the first.
func (s *sink) windows() []int {
	rs := s.snapshot()
	sort.Slice(rs, func(i, j int) bool { return rs[i].start.Before(rs[j].start) })
	var out []int
	for _, r := range rs {
		i := int(r.start.Sub(rs[0].start) / time.Second)
		for len(out) <= i {
			out = append(out, 0)
		}
		out[i]++
	}
	return out
}

// orderViolations lists a key's record answered 2xx before an earlier one
// of its key, or sent before the earlier one was answered.
func (s *sink) orderViolations() []string {
	rs := s.snapshot()
	type k struct {
		p   int32
		key string
	}
	last := make(map[k]request)
	var out []string
	for _, r := range rs {
		if r.status != http.StatusOK {
			continue
		}
		if prev, ok := last[k{r.partition, r.key}]; ok && (r.offset < prev.offset || r.start.Before(prev.end)) {
			out = append(out, fmt.Sprintf("key %s: %d after %d", r.key, r.offset, prev.offset))
		}
		last[k{r.partition, r.key}] = r
	}
	return out
}

// okSpan is the start of the first 2xx and the end of the last.
func (s *sink) okSpan() (first, last time.Time) {
	for _, r := range s.snapshot() {
		if r.status != http.StatusOK {
			continue
		}
		if first.IsZero() || r.start.Before(first) {
			first = r.start
		}
		if r.end.After(last) {
			last = r.end
		}
	}
	return first, last
}

func (s *sink) maxAttempt() int {
	m := 0
	for _, r := range s.snapshot() {
		m = max(m, r.attempt)
	}
	return m
}
