// Command fanout measures many subscriptions on one topic across a
// cluster of real `keyhook serve` processes (issue 29's "Measured"): N
// nodes (-nodes, each its own process of the binary -bin, with the extra
// flags -args, e.g. --shared-read=false), a real Kafka broker, a real Redis, one
// topic of -partitions partitions and -subs subscriptions on it, created
// through node 1's REST API, all delivering to an HTTP sink in this
// process that answers at once and keeps, per subscription, when it first
// got each record and whether each key's records came in order. Each
// record's value carries its produce time. Phases, each printed as a table:
//
//   - idle: after -settle, a warm-up (one record per key, delivered to
//     every subscription) and -quiet, each node's goroutines, RSS, CPU over -window
//     and established broker connections, against issue 29's targets;
//   - load: -rate records a second for -load: the fan-out latency (from
//     produce to the last of the subscriptions' first deliveries) p50, p99
//     and max, deliveries a second, whether every subscription got every
//     record (lost, duplicates, per-key order violations), each node's CPU
//     under load and its part of the records, and the broker's bytes out ÷ bytes in for the topic over
//     the phase, read from Kafka's own counters (BrokerTopicMetrics
//     BytesInPerSec/BytesOutPerSec Count, over JMX with
//     `scripts/kafka.sh jmx`; the broker must have been started with
//     KEYHOOK_KAFKA_JMX_PORT, and -kafka-dir name its state dir); then
//     how busy the machine's cores were while producing (/proc/stat) and
//     who took them: the nodes, this process (the sink and the
//     producer), the broker and Redis, found by the ports they listen on
//     (machine.go). Every one of them shares the machine, so a latency
//     measured with no core left is the wait for one as much as keyhook;
//   - ceilings (-ceiling, on by default): the load's fan-out once more,
//     at -rate for -ceiling-for, made by keyhook's HTTP client alone
//     (ceiling A) and then by Go's net/http client, each to a sink of its
//     own, nothing else working: the p50, p99 and max a client that only
//     sends the requests reaches here, keyhook's p99 less it and over it,
//     and the machine's table (ceiling.go);
//   - restart (-restart term,kill): node 2 stopped with SIGTERM (or
//     SIGKILL) while records keep coming at -rate, started again: how long
//     until every subscription delivered a record produced after the stop
//     began, and until every subscription did so on every partition;
//     then lost, duplicates and order violations once all is delivered.
//
// With -down-one the run is issue 29's outage instead (default 200
// subscriptions): -rate for -load with every endpoint up, then
// subscription 0's endpoint answering 503 for -down (default 5m) while
// production goes on: the other subscriptions' delivery rate in each phase
// and its ratio (target ≥ 0.95), their fan-out p99, then how long the
// downed one took to catch up and whether it got every record in key
// order.
//
// With -baseline the scenario runs twice in one invocation, first with
// -baseline-args (default --shared-read=false: a group per subscription) on
// -baseline-redis, then as asked, and a last table puts the headline
// figures of both side by side with their ratio.
//
// Subscriptions live in Redis: give each run an empty database (the URL's
// /db). A smoke run on a small machine:
//
//	go build -o /tmp/keyhook ./cmd/keyhook
//	export KEYHOOK_KAFKA_DIR=$(mktemp -d) KEYHOOK_KAFKA_JMX_PORT=19876
//	export "$(scripts/kafka.sh start | tail -n 1)"; redis-server --port 6390 --save '' &
//	go run ./test/bench/fanout -bin /tmp/keyhook -nodes 3 -subs 50 -load 20s \
//		-baseline -baseline-redis redis://127.0.0.1:6390/1 -redis redis://127.0.0.1:6390/2
//	go run ./test/bench/fanout -bin /tmp/keyhook -redis redis://127.0.0.1:6390/3 -down-one -subs 50 -down 1m
//
// Issue 29's figures: -subs 1000 -baseline, with
// -baseline-subs 100 where the machine cannot run 1,000 groups, the
// defaults otherwise.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/auth"
	"github.com/keyhook/keyhook/nodes"
	"github.com/keyhook/keyhook/test/bench/serve"
)

type config struct {
	bin, brokers, redisURL, kafkaDir, kafkaScript string
	extra                                         []string
	nodes, subs, partitions, keys, port           int
	rate                                          float64
	load, settle, quiet, window, drain, down      time.Duration
	ceilingFor                                    time.Duration
	restart                                       []string
	downOne                                       bool
	// ceiling runs the load's fan-out again after the load phase, with
	// clients that only send the requests (ceiling.go).
	ceiling bool
	// latencies, when set, is a CSV file for the load phase's records,
	// one row each: when it was produced, its partition, and when the
	// median and the last subscription got it (to tell steady cost from
	// stalls, and which partitions' records wait).
	latencies string
}

func main() {
	var c config
	flag.StringVar(&c.bin, "bin", "", "the keyhook binary to run (required)")
	flag.StringVar(&c.brokers, "brokers", os.Getenv("KEYHOOK_TEST_KAFKA_BROKERS"), "the Kafka broker")
	flag.StringVar(&c.redisURL, "redis", "redis://127.0.0.1:6379/0", "the Redis URL (an empty database)")
	flag.StringVar(&c.kafkaDir, "kafka-dir", os.Getenv("KEYHOOK_KAFKA_DIR"), "the broker's scripts/kafka.sh state dir, for its byte counters over JMX (empty: not measured)")
	flag.StringVar(&c.kafkaScript, "kafka-script", "scripts/kafka.sh", "scripts/kafka.sh, which reads the counters")
	extra := flag.String("args", "", "more flags for keyhook serve, space-separated (e.g. --shared-read=false)")
	flag.IntVar(&c.nodes, "nodes", 3, "keyhook serve processes")
	flag.IntVar(&c.subs, "subs", 0, "subscriptions on the topic (default 1000, 200 with -down-one)")
	flag.IntVar(&c.partitions, "partitions", 12, "partitions of the topic")
	flag.IntVar(&c.keys, "keys", 100, "distinct record keys, taken in turn")
	flag.IntVar(&c.port, "port", 18500, "node i serves HTTP on 127.0.0.1:port+i")
	flag.Float64Var(&c.rate, "rate", 10, "records produced a second in the load phases")
	flag.DurationVar(&c.load, "load", 60*time.Second, "how long the load phase produces")
	flag.DurationVar(&c.settle, "settle", 30*time.Second, "wait after the subscriptions were created, before the warm-up")
	flag.DurationVar(&c.quiet, "quiet", 30*time.Second, "wait after the warm-up before idle is measured: the warm-up's commits, flushes and garbage settle")
	flag.DurationVar(&c.window, "window", 20*time.Second, "idle CPU is measured over this")
	flag.DurationVar(&c.drain, "drain", 3*time.Minute, "how long to wait for the last deliveries after a phase")
	flag.StringVar(&c.latencies, "latencies", "", "write the load phase's records to this CSV: seq, partition, produced (unix ms), p50 and last delivery (ms after produce); each ceiling's bursts to the same name with .ceiling-a or .net-http before its extension")
	restart := flag.String("restart", "term,kill", "restarts of node 2 to measure: term, kill, both or none")
	flag.BoolVar(&c.ceiling, "ceiling", true, "after the load phase, make its fan-out with keyhook's HTTP client alone (ceiling A), then with Go's net/http, nothing else working: what keyhook's p99 is set against")
	flag.DurationVar(&c.ceilingFor, "ceiling-for", 0, "how long each ceiling sends bursts at -rate (default -load: as many bursts as the load phase's records, for the same percentiles)")
	flag.BoolVar(&c.downOne, "down-one", false, "run the outage scenario instead: one endpoint down for -down among -subs")
	flag.DurationVar(&c.down, "down", 5*time.Minute, "how long the endpoint is down with -down-one")
	baseline := flag.Bool("baseline", false, "run the scenario first with -baseline-args on -baseline-redis, then as asked, and compare")
	baseArgs := flag.String("baseline-args", "--shared-read=false", "the baseline run's flags for keyhook serve (default: a group per subscription)")
	baseRedis := flag.String("baseline-redis", "", "the baseline run's Redis URL, another empty database")
	baseSubs := flag.Int("baseline-subs", 0, "the baseline run's subscriptions (default -subs)")
	flag.Parse()
	c.extra = strings.Fields(*extra)
	for _, r := range strings.Split(*restart, ",") {
		switch r = strings.TrimSpace(r); r {
		case "term", "kill":
			c.restart = append(c.restart, r)
		case "", "none":
		default:
			fail(fmt.Errorf("-restart: %q is not term, kill or none", r))
		}
	}
	if c.ceilingFor <= 0 {
		c.ceilingFor = c.load
	}
	if c.subs == 0 {
		c.subs = 1000
		if c.downOne {
			c.subs = 200
		}
	}
	if c.bin == "" || c.brokers == "" {
		fmt.Fprintln(os.Stderr, "fanout: -bin and -brokers (or KEYHOOK_TEST_KAFKA_BROKERS) are required")
		os.Exit(2)
	}
	if c.nodes < 1 || c.subs < 1 || c.partitions < 1 || c.keys < 1 || c.rate <= 0 {
		fail(errors.New("-nodes, -subs, -partitions, -keys and -rate must be positive"))
	}
	if c.downOne && c.subs < 2 {
		fail(errors.New("-down-one needs two subscriptions at least"))
	}
	if !*baseline {
		if _, err := run(c); err != nil {
			fail(err)
		}
		return
	}
	if *baseRedis == "" || *baseRedis == c.redisURL {
		fail(errors.New("-baseline needs -baseline-redis, another empty database"))
	}
	bc := c
	bc.extra, bc.redisURL = strings.Fields(*baseArgs), *baseRedis
	// The ceilings measure the machine, not the model: once, in the run
	// measured.
	bc.ceiling = false
	if *baseSubs > 0 {
		bc.subs = *baseSubs
	}
	before, err := run(bc)
	if err != nil {
		fail(fmt.Errorf("baseline: %w", err))
	}
	fmt.Println()
	after, err := run(c)
	if err != nil {
		fail(err)
	}
	compare(before, after, bc, c)
}

// compare prints the headline figures of the baseline run and the
// measured one side by side, with their ratio.
func compare(before, after []figure, bc, c config) {
	label := func(c config) string {
		flags := "no extra flags (the shared read)"
		if len(c.extra) > 0 {
			flags = strings.Join(c.extra, " ")
		}
		return fmt.Sprintf("%d subscriptions, %s", c.subs, flags)
	}
	fmt.Printf("\n## against the baseline, same run\n\n| | baseline (%s) | %s | ÷ baseline |\n|---|---|---|---|\n", label(bc), label(c))
	was := map[string]float64{}
	for _, f := range before {
		was[f.name] = f.v
	}
	for _, f := range after {
		b, ok := was[f.name]
		ratio := "—"
		if ok && b != 0 {
			ratio = fmt.Sprintf("%.3f", f.v/b)
		}
		unit := ""
		if f.unit != "" {
			unit = " " + f.unit
		}
		bs := "—"
		if ok {
			bs = fmt.Sprintf("%.4g%s", b, unit)
		}
		fmt.Printf("| %s | %s | %.4g%s | %s |\n", f.name, bs, f.v, unit, ratio)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "fanout:", err)
	os.Exit(1)
}

// bench is one run: its nodes, sink and producer, driven by run's
// goroutine.
type bench struct {
	c          config
	nodes      []*serve.Node
	sink       *sink
	prod       *producer
	topic      string
	brokerPort string
	bytes      *brokerBytes  // nil: not measured
	token      string        // the API's bearer token
	figs       []figure      // the headline figures, for -baseline's comparison
	loadP99    time.Duration // the load phase's fan-out p99, for the ceiling's table
}

// figure is one headline figure of a run.
type figure struct {
	name, unit string
	v          float64
}

func (b *bench) record(name, unit string, v float64) {
	b.figs = append(b.figs, figure{name, unit, v})
}

func run(c config) ([]figure, error) {
	ctx := context.Background()
	stamp := strconv.FormatInt(time.Now().UnixNano(), 36)
	b := &bench{c: c, topic: "fanout-" + stamp, token: auth.Generate()}
	_, b.brokerPort, _ = net.SplitHostPort(strings.Split(c.brokers, ",")[0])
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(c.brokers, ",")...), kgo.DefaultProduceTopic(b.topic),
		kgo.ProducerLinger(0))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, int32(c.partitions), 1, nil, b.topic); err != nil {
		return nil, fmt.Errorf("create topic: %w", err)
	}
	if c.kafkaDir != "" {
		b.bytes = &brokerBytes{script: c.kafkaScript, dir: c.kafkaDir, topic: b.topic}
		if _, _, err := b.bytes.read(); err != nil {
			fmt.Fprintf(os.Stderr, "fanout: the broker's byte counters cannot be read (%v): bytes out ÷ in not measured\n", err)
			b.bytes = nil
		}
	}
	if b.sink, err = newSink(c.subs, c.keys); err != nil {
		return nil, err
	}
	defer b.sink.close()
	b.prod = &producer{cl: cl, sink: b.sink}

	token := b.token
	dir, err := os.MkdirTemp("", "keyhook-fanout-")
	if err != nil {
		return nil, err
	}
	for i := range c.nodes {
		addr := fmt.Sprintf("127.0.0.1:%d", c.port+i)
		args := append([]string{"serve", "--kafka-brokers", c.brokers, "--redis-url", c.redisURL,
			"--http-addr", addr, "--allow-private-endpoints", "--metrics-public",
			"--config-topic", "_keyhook_config_" + stamp, "--node-id", fmt.Sprintf("fanout-%d", i+1)}, c.extra...)
		n, err := serve.Start(c.bin, args, []string{"KEYHOOK_BOOTSTRAP_TOKEN=" + token}, addr, filepath.Join(dir, fmt.Sprintf("node-%d.log", i+1)))
		if err != nil {
			return nil, err
		}
		defer n.Close()
		b.nodes = append(b.nodes, n)
	}
	fmt.Printf("%s\n", strings.Join(os.Args[1:], " "))
	fmt.Printf("fanout: %d nodes of %s %s, %d subscriptions on one %d-partition topic, %d keys; node logs in %s\n",
		c.nodes, c.bin, strings.Join(c.extra, " "), c.subs, c.partitions, c.keys, dir)
	t0 := time.Now()
	cpu0 := b.nodesCPU()
	if err := createSubs(b.nodes[0].Base, token, b.topic, b.sink.url, c.subs); err != nil {
		return nil, err
	}
	// What the nodes spent meanwhile: each hears of every change and
	// starts a consumer for each new subscription.
	cpu := b.nodesCPU()
	for i := range cpu {
		cpu[i] = math.Round((cpu[i]-cpu0[i])*10) / 10
	}
	fmt.Printf("created %d subscriptions through node 1 in %v; the nodes' CPU meanwhile: %v s\n", c.subs, time.Since(t0).Round(time.Millisecond), cpu)
	time.Sleep(c.settle)
	if err := b.warmUp(ctx); err != nil {
		return nil, err
	}
	if c.downOne {
		return b.figs, b.downOne(ctx)
	}
	if err := b.idle(ctx); err != nil {
		return nil, err
	}
	if err := b.loadPhase(ctx); err != nil {
		return nil, err
	}
	if c.ceiling {
		if err := b.ceilingPhase(ctx); err != nil {
			return nil, err
		}
	}
	for _, r := range c.restart {
		if err := b.restartPhase(ctx, r); err != nil {
			return nil, err
		}
	}
	return b.figs, nil
}

// createSubs creates n subscriptions, /s/<i> of the sink each, four
// requests at a time.
func createSubs(base, token, topic, sinkURL string, n int) error {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				body := fmt.Sprintf(`{"name":"fanout-%d","topics":[%q],"endpoint":{"url":"%s/s/%d"}}`, i, topic, sinkURL, i)
				req, _ := http.NewRequest(http.MethodPost, base+"/v1/subscriptions", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+token)
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					errs <- err
					continue
				}
				resp.Body.Close()
				if resp.StatusCode/100 != 2 {
					errs <- fmt.Errorf("create subscription %d: %s", i, resp.Status)
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	return <-errs
}

// all is every subscription's index.
func (b *bench) all() []int {
	s := make([]int, b.c.subs)
	for i := range s {
		s[i] = i
	}
	return s
}

// warmUp produces a record per key and waits until every subscription got
// each: every subscription is assigned and delivering.
func (b *bench) warmUp(ctx context.Context) error {
	t0 := time.Now()
	from, to, err := b.prod.burst(b.c.keys)
	if err != nil {
		return err
	}
	parts := map[int32]bool{}
	b.sink.mu.Lock()
	for _, r := range b.sink.records[from:to] {
		parts[r.partition] = true
	}
	b.sink.mu.Unlock()
	if left := b.sink.waitAll(b.all(), from, to, b.c.drain); left > 0 {
		return fmt.Errorf("warm-up: %d of %d deliveries missing after %v", left, (to-from)*b.c.subs, b.c.drain)
	}
	fmt.Printf("warm-up: %d records (%d of %d partitions) delivered to all %d subscriptions in %v\n",
		to-from, len(parts), b.c.partitions, b.c.subs, time.Since(t0).Round(time.Millisecond))
	return nil
}

func (b *bench) idle(ctx context.Context) error {
	time.Sleep(b.c.quiet)
	s, err := serve.Measure(ctx, b.nodes, b.brokerPort, b.c.window)
	if err != nil {
		return err
	}
	fmt.Printf("\n## idle (%d subscriptions, CPU over %v)\n\n", b.c.subs, b.c.window)
	b.nodeTable(s, true)
	b.record("idle goroutines, the most of a node", "", maxBy(s, func(x serve.Sample) float64 { return x.Goroutines }))
	b.record("idle RSS, the most of a node", "MiB", maxBy(s, func(x serve.Sample) float64 { return x.RSS / (1 << 20) }))
	b.record("idle CPU, the most of a node", "% of a core", maxBy(s, func(x serve.Sample) float64 { return 100 * x.CPU }))
	b.record("idle broker connections, the most of a node", "", maxBy(s, func(x serve.Sample) float64 { return x.Conns }))
	return nil
}

// nodeTable prints a row per figure, a column per node, the max, and
// issue 29's idle target when targets is set.
func (b *bench) nodeTable(s []serve.Sample, targets bool) {
	fmt.Printf("| per node |")
	for i := range s {
		fmt.Printf(" node %d |", i+1)
	}
	fmt.Printf(" max |")
	if targets {
		fmt.Printf(" target | |")
	}
	fmt.Println()
	cols := len(s) + 2
	if targets {
		cols += 2
	}
	fmt.Println("|" + strings.Repeat("---|", cols))
	// target < 0: none.
	row := func(name, format string, get func(serve.Sample) float64, target float64) {
		fmt.Printf("| %s |", name)
		m := 0.0
		for _, x := range s {
			v := get(x)
			m = max(m, v)
			fmt.Printf(" "+format+" |", v)
		}
		fmt.Printf(" "+format+" |", m)
		if targets {
			if target >= 0 {
				fmt.Printf(" ≤ "+format+" | %s |", target, verdict(m <= target))
			} else {
				fmt.Printf(" | |")
			}
		}
		fmt.Println()
	}
	row("goroutines", "%.0f", func(x serve.Sample) float64 { return x.Goroutines }, 5000)
	row("RSS (MiB)", "%.1f", func(x serve.Sample) float64 { return x.RSS / (1 << 20) }, 400)
	row("CPU (% of a core)", "%.2f", func(x serve.Sample) float64 { return 100 * x.CPU }, 5)
	row("broker connections", "%.0f", func(x serve.Sample) float64 { return x.Conns }, -1)
	row("metric series on /metrics", "%.0f", func(x serve.Sample) float64 { return x.Series }, -1)
	// An overflow series holds what the SDK's series cap took from every
	// subscription past it: their lag and counts without their label.
	row("of which merged past the SDK's series cap (otel_metric_overflow)", "%.0f", func(x serve.Sample) float64 { return x.Overflow }, 0)
}

// shareRow prints the part of the records [from, to) on the partitions
// each node delivered at the end of the load, from /v1/nodes: with the
// shared read every subscription's; with a group each (-baseline), those
// of the subscription whose ID sorts first: keys hash unevenly over partitions (the
// default 100 keys put 2% to 13% of the records on one of 12, and 42–44%
// on the node of partitions 0, 2, 4, 6 or 4, 6, 8, 10), so the nodes'
// loads differ by as much.
func (b *bench) shareRow(from, to int) {
	owner, err := b.owners()
	if err != nil {
		fmt.Printf("\n(the nodes' partitions: %v)\n", err)
		return
	}
	b.sink.mu.Lock()
	per := make([]int, len(b.nodes))
	for seq := from; seq < to; seq++ {
		if i, ok := owner[b.sink.records[seq].partition]; ok {
			per[i]++
		}
	}
	b.sink.mu.Unlock()
	fmt.Printf("| records of its partitions |")
	most := 0
	for _, n := range per {
		most = max(most, n)
		fmt.Printf(" %.1f%% |", 100*float64(n)/float64(max(to-from, 1)))
	}
	fmt.Printf(" %.1f%% |\n", 100*float64(most)/float64(max(to-from, 1)))
	b.record("records on the busiest node's partitions", "%", 100*float64(most)/float64(max(to-from, 1)))
}

// owners maps each partition of the topic to the index of the node that
// delivers it for the subscription whose ID sorts first, as the nodes
// last reported (node i is fanout-<i+1>).
func (b *bench) owners() (map[int32]int, error) {
	req, _ := http.NewRequest(http.MethodGet, b.nodes[0].Base+"/v1/nodes", nil)
	req.Header.Set("Authorization", "Bearer "+b.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /v1/nodes: %s", resp.Status)
	}
	var list struct {
		Items []nodes.Info `json:"items"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, fmt.Errorf("GET /v1/nodes: %w", err)
	}
	// Every subscription is on every partition of the topic; the one
	// whose ID sorts first stands for them all.
	first := ""
	for _, n := range list.Items {
		for _, o := range n.Owned {
			if o.Topic == b.topic && (first == "" || o.Subscription < first) {
				first = o.Subscription
			}
		}
	}
	owner := make(map[int32]int)
	for _, n := range list.Items {
		i, err := strconv.Atoi(strings.TrimPrefix(n.ID, "fanout-"))
		if err != nil || i < 1 || i > len(b.nodes) {
			continue
		}
		for _, o := range n.Owned {
			if o.Topic == b.topic && o.Subscription == first && o.Ranges == "" {
				owner[o.Partition] = i - 1
			}
		}
	}
	if len(owner) == 0 {
		return nil, errors.New("no node reported a partition of the topic")
	}
	return owner, nil
}

// scrapeSettle is how long the load phase waits after scraping the nodes
// before it produces.
const scrapeSettle = 5 * time.Second

// totals sums the counters of the shared read over every node: the
// cursors that left the shared read and the records their catch-ups read.
// A node that does not answer counts nothing.
func (b *bench) totals() (detaches, caughtUp float64) {
	for _, n := range b.nodes {
		m, err := serve.Totals(n.Base)
		if err != nil {
			continue
		}
		detaches += m["keyhook_cursor_detaches_total"]
		caughtUp += m["keyhook_records_caught_up_total"]
	}
	return detaches, caughtUp
}

func maxBy(s []serve.Sample, get func(serve.Sample) float64) float64 {
	m := 0.0
	for _, x := range s {
		m = max(m, get(x))
	}
	return m
}

func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}

func (b *bench) loadPhase(ctx context.Context) error {
	var in0, out0 float64
	if b.bytes != nil {
		var err error
		if in0, out0, err = b.bytes.read(); err != nil {
			return err
		}
	}
	det0, cu0 := b.totals()
	// Those scrapes (and the idle phase's, just before) cost a node with
	// a thousand subscriptions a third of a second of CPU each and leave
	// it a GC to run: production starts once that is done, so that the
	// latency measured is the deliveries', not the bench's own scrapes'.
	// For the same reason nothing scrapes the nodes while producing: the
	// phase reads their CPU from /proc, the rest after the drain.
	time.Sleep(scrapeSettle)
	type measured struct {
		cpu []float64
		err error
	}
	cpu := make(chan measured, 1)
	go func() {
		c, err := serve.MeasureCPU(ctx, b.nodes, b.c.load)
		cpu <- measured{c, err}
	}()
	share, err := startMachineShare(b.nodes, b.brokerPort, b.c.redisURL)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fanout: the machine's share not measured: %v\n", err)
	}
	start := time.Now()
	from, to, err := b.prod.run(ctx, b.c.rate, b.c.load)
	if err != nil {
		return err
	}
	end := time.Now()
	m := <-cpu
	if m.err != nil {
		return m.err
	}
	// Taken now, not after the drain: the share of the producing phase.
	machine := share.finish()
	left := b.sink.waitAll(b.all(), from, to, b.c.drain)
	time.Sleep(2 * time.Second) // the last fetches' bytes
	samples, err := serve.Read(b.nodes, b.brokerPort)
	if err != nil {
		return err
	}
	for i := range samples {
		samples[i].CPU = m.cpu[i]
	}
	fmt.Printf("\n## load (%g records/s for %v: %d records, %d deliveries expected)\n\n", b.c.rate, b.c.load, to-from, (to-from)*b.c.subs)
	lat, complete := b.fanoutLatency(b.all(), from, to)
	b.loadP99 = pct(lat, 0.99)
	if b.c.latencies != "" {
		if err := b.writeLatencies(b.c.latencies, b.all(), from, to); err != nil {
			return err
		}
	}
	fmt.Println("| | value | target | |")
	fmt.Println("|---|---|---|---|")
	fmt.Printf("| fan-out latency p50 (produce → last of %d) | %v | | |\n", b.c.subs, pct(lat, 0.50))
	fmt.Printf("| fan-out latency p99 | %v | ≤ 250ms (sink answers at once) | %s |\n", pct(lat, 0.99), verdict(len(lat) > 0 && pct(lat, 0.99) <= 250*time.Millisecond))
	fmt.Printf("| fan-out latency max | %v | | |\n", pct(lat, 1))
	fmt.Printf("| records delivered to every subscription | %d of %d | all | %s |\n", complete, to-from, verdict(complete == to-from))
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.record("fan-out latency p50", "ms", ms(pct(lat, 0.5)))
	b.record("fan-out latency p99", "ms", ms(pct(lat, 0.99)))
	b.record("fan-out latency max", "ms", ms(pct(lat, 1)))
	during := b.deliveriesBetween(b.all(), from, to, start, end)
	fmt.Printf("| deliveries/s while producing | %.0f | %.0f (rate × subscriptions) | %.3f × |\n",
		float64(during)/end.Sub(start).Seconds(), float64(to-from)*float64(b.c.subs)/end.Sub(start).Seconds(),
		float64(during)/float64((to-from)*b.c.subs))
	fmt.Printf("| last delivery after the last produce | %v | | |\n", b.lastDelivery(b.all(), from, to).Sub(end).Round(time.Millisecond))
	b.integrityRows(left, from, to)
	if b.bytes != nil {
		in1, out1, err := b.bytes.read()
		if err != nil {
			return err
		}
		din, dout := in1-in0, out1-out0
		ratio := dout / din
		fmt.Printf("| broker bytes in / out for the topic | %.0f / %.0f | | |\n", din, dout)
		fmt.Printf("| broker bytes out ÷ in | %.2f | ≤ 1.2 | %s |\n", ratio, verdict(din > 0 && ratio <= 1.2))
		b.record("broker bytes out ÷ in", "", ratio)
	} else {
		fmt.Println("| broker bytes out ÷ in | not measured (-kafka-dir, KEYHOOK_KAFKA_JMX_PORT) | ≤ 1.2 | |")
	}
	det1, cu1 := b.totals()
	fmt.Printf("| cursors detached / records read by catch-ups (--shared-read) | %.0f / %.0f | | |\n", det1-det0, cu1-cu0)
	fmt.Printf("\nThe nodes while producing (CPU over %v; goroutines, RSS and connections read once every record was delivered):\n\n", b.c.load)
	b.nodeTable(samples, false)
	b.shareRow(from, to)
	b.record("CPU under load, the most of a node", "% of a core", maxBy(samples, func(x serve.Sample) float64 { return 100 * x.CPU }))
	b.printMachineShare(machine, "producing", "machine busy under load")
	return nil
}

// integrityRows prints what is missing, duplicated and out of key order
// for the records [from, to).
func (b *bench) integrityRows(left, from, to int) {
	b.sink.mu.Lock()
	dups, reorder := 0, 0
	for i := range b.c.subs {
		dups += b.sink.dups[i]
		reorder += b.sink.reorder[i]
	}
	b.sink.mu.Unlock()
	fmt.Printf("| lost (not delivered within %v) | %d | 0 | %s |\n", b.c.drain, left, verdict(left == 0))
	fmt.Printf("| duplicates, so far in the run | %d | | |\n", dups)
	fmt.Printf("| per-key order violations, so far in the run | %d | 0 | %s |\n", reorder, verdict(reorder == 0))
	fmt.Printf("| sink: refused (503) / unreadable requests | %d / %d | | |\n", b.sink.refused.Load(), b.sink.bad.Load())
	fmt.Printf("| sink: connections it failed to accept (this process out of file descriptors) | %d | 0 | %s |\n", b.sink.acceptErrs.Load(), verdict(b.sink.acceptErrs.Load() == 0))
}

// fanoutLatency is, for each record of [from, to) that every subscription
// of subs got, the time from its produce to the last first delivery; and
// how many records that is.
func (b *bench) fanoutLatency(subs []int, from, to int) ([]time.Duration, int) {
	return fanoutLatencyOf(b.sink, subs, from, to)
}

// fanoutLatencyOf is fanoutLatency of the records sink s got.
func fanoutLatencyOf(s *sink, subs []int, from, to int) ([]time.Duration, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var lat []time.Duration
	for seq := from; seq < to; seq++ {
		last, ok := int64(0), true
		for _, sub := range subs {
			t := s.at(sub, seq)
			if t == 0 {
				ok = false
				break
			}
			last = max(last, t)
		}
		if ok {
			lat = append(lat, time.Duration(last-s.records[seq].produced))
		}
	}
	slices.Sort(lat)
	return lat, len(lat)
}

// writeLatencies writes the records [from, to) to path as CSV: for each,
// when it was produced, its partition, and how long after that the median
// and the last of subs got it (empty when one has not).
func (b *bench) writeLatencies(path string, subs []int, from, to int) error {
	return writeLatenciesOf(b.sink, path, subs, from, to)
}

// writeLatenciesOf is writeLatencies of the records sink s got.
func writeLatenciesOf(s *sink, path string, subs []int, from, to int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out strings.Builder
	out.WriteString("seq,partition,produced_unix_ms,p50_ms,last_ms\n")
	ts := make([]int64, 0, len(subs))
	for seq := from; seq < to; seq++ {
		rec := s.records[seq]
		ts = ts[:0]
		for _, sub := range subs {
			if t := s.at(sub, seq); t != 0 {
				ts = append(ts, t-rec.produced)
			}
		}
		slices.Sort(ts)
		p50, last := "", ""
		if len(ts) > 0 {
			p50 = strconv.FormatFloat(float64(ts[len(ts)/2])/1e6, 'f', 1, 64)
		}
		if len(ts) == len(subs) && len(ts) > 0 {
			last = strconv.FormatFloat(float64(ts[len(ts)-1])/1e6, 'f', 1, 64)
		}
		fmt.Fprintf(&out, "%d,%d,%d,%s,%s\n", seq, rec.partition, rec.produced/1e6, p50, last)
	}
	return os.WriteFile(path, []byte(out.String()), 0o644)
}

// deliveriesBetween counts the first deliveries to subs of the records
// [from, to) that came between start and end.
func (b *bench) deliveriesBetween(subs []int, from, to int, start, end time.Time) int {
	b.sink.mu.Lock()
	defer b.sink.mu.Unlock()
	s, e := start.UnixNano(), end.UnixNano()
	n := 0
	for _, sub := range subs {
		for seq := from; seq < to; seq++ {
			if t := b.sink.at(sub, seq); t != 0 && t >= s && t <= e {
				n++
			}
		}
	}
	return n
}

// lastDelivery is when the last first delivery to subs of the records
// [from, to) came.
func (b *bench) lastDelivery(subs []int, from, to int) time.Time {
	b.sink.mu.Lock()
	defer b.sink.mu.Unlock()
	last := int64(0)
	for _, sub := range subs {
		for seq := from; seq < to; seq++ {
			last = max(last, b.sink.at(sub, seq))
		}
	}
	return time.Unix(0, last)
}

func pct(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i].Round(time.Millisecond)
}

// nodesCPU reads each node's CPU seconds so far, 0 for one it cannot.
func (b *bench) nodesCPU() []float64 {
	out := make([]float64, len(b.nodes))
	for i, n := range b.nodes {
		out[i], _ = serve.CPUSeconds(n.Pid())
	}
	return out
}

// restartPhase stops node 2 (SIGTERM for term, SIGKILL for kill) while
// records keep coming, starts it again, and measures how long until every
// subscription delivers again.
func (b *bench) restartPhase(ctx context.Context, how string) error {
	if len(b.nodes) < 2 {
		fmt.Println("\n## restart: needs two nodes at least; skipped")
		return nil
	}
	sig, name := syscall.SIGTERM, "SIGTERM"
	if how == "kill" {
		sig, name = syscall.SIGKILL, "SIGKILL"
	}
	node := b.nodes[1]
	pctx, stopProducing := context.WithCancel(ctx)
	defer stopProducing()
	type produced struct {
		from, to int
		err      error
	}
	prodDone := make(chan produced, 1)
	go func() {
		from, to, err := b.prod.run(pctx, b.c.rate, 10*time.Minute)
		prodDone <- produced{from, to, err}
	}()
	time.Sleep(3 * time.Second) // production is under way
	b.sink.mu.Lock()
	first := len(b.sink.records) // the first record produced after the restart began
	b.sink.mu.Unlock()
	t0 := time.Now()
	if err := node.Stop(sig, 2*time.Minute); err != nil {
		return err
	}
	stopped := time.Since(t0)
	if err := node.Restart(); err != nil {
		return err
	}
	up := time.Since(t0)
	// Poll until every subscription delivered a record produced since t0 on
	// every partition.
	anyAt := make([]time.Duration, b.c.subs)
	partAt := make([][]time.Duration, b.c.subs)
	for i := range partAt {
		partAt[i] = make([]time.Duration, b.c.partitions)
	}
	limit := time.Now().Add(b.c.drain)
	var allAny, allParts time.Duration
	for allParts == 0 && time.Now().Before(limit) {
		time.Sleep(250 * time.Millisecond)
		b.sink.mu.Lock()
		recs := b.sink.records
		doneAny, doneParts := 0, 0
		for sub := range b.c.subs {
			for seq := first; seq < len(recs); seq++ {
				t := b.sink.at(sub, seq)
				p := recs[seq].partition
				if t == 0 || p < 0 || int(p) >= b.c.partitions {
					continue
				}
				d := time.Duration(t - t0.UnixNano())
				if anyAt[sub] == 0 || d < anyAt[sub] {
					anyAt[sub] = d
				}
				if partAt[sub][p] == 0 || d < partAt[sub][p] {
					partAt[sub][p] = d
				}
			}
			if anyAt[sub] != 0 {
				doneAny++
			}
			if !slices.Contains(partAt[sub], 0) {
				doneParts++
			}
		}
		b.sink.mu.Unlock()
		if doneAny == b.c.subs && allAny == 0 {
			allAny = maxOf(anyAt)
		}
		if doneParts == b.c.subs {
			for _, p := range partAt {
				allParts = max(allParts, maxOf(p))
			}
		}
	}
	time.Sleep(5 * time.Second) // some production after the recovery
	stopProducing()
	pr := <-prodDone
	if pr.err != nil {
		return pr.err
	}
	left := b.sink.waitAll(b.all(), pr.from, pr.to, b.c.drain)
	fmt.Printf("\n## restart of node 2 by %s (%g records/s throughout: %d records)\n\n", name, b.c.rate, pr.to-pr.from)
	fmt.Println("| | value | target | |")
	fmt.Println("|---|---|---|---|")
	fmt.Printf("| the process exited after | %v | | |\n", stopped.Round(time.Millisecond))
	fmt.Printf("| serving again after | %v | | |\n", up.Round(time.Millisecond))
	fmt.Printf("| every subscription delivered a record produced since the stop, after | %s | | |\n", since(allAny))
	fmt.Printf("| every subscription delivered one on every partition, after | %s | ≤ 30s | %s |\n", since(allParts), verdict(allParts > 0 && allParts <= 30*time.Second))
	b.integrityRows(left, pr.from, pr.to)
	if allAny > 0 {
		b.record(name+": every subscription delivering again", "s", allAny.Seconds())
	}
	if allParts > 0 {
		b.record(name+": every subscription on every partition", "s", allParts.Seconds())
	}
	return nil
}

func since(d time.Duration) string {
	if d == 0 {
		return "not within -drain"
	}
	return d.Round(time.Millisecond).String()
}

func maxOf(ds []time.Duration) time.Duration {
	m := time.Duration(0)
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// downOne is the outage scenario: subscription 0's endpoint answers 503
// for -down among the others.
func (b *bench) downOne(ctx context.Context) error {
	others := b.all()[1:]
	aStart := time.Now()
	aFrom, aTo, err := b.prod.run(ctx, b.c.rate, b.c.load)
	if err != nil {
		return err
	}
	aEnd := time.Now()
	if left := b.sink.waitAll(b.all(), aFrom, aTo, b.c.drain); left > 0 {
		return fmt.Errorf("all up: %d deliveries missing after %v", left, b.c.drain)
	}
	det0, cu0 := b.totals()
	b.sink.down.Store(1)
	bStart := time.Now()
	bFrom, bTo, err := b.prod.run(ctx, b.c.rate, b.c.down)
	if err != nil {
		return err
	}
	bEnd := time.Now()
	leftOthers := b.sink.waitAll(others, bFrom, bTo, b.c.drain)
	b.sink.down.Store(0)
	upAt := time.Now()
	b.sink.mu.Lock()
	reorderBefore := b.sink.reorder[0]
	b.sink.mu.Unlock()
	leftDowned := b.sink.waitAll([]int{0}, aFrom, bTo, max(b.c.drain, b.c.down))
	b.sink.mu.Lock()
	var caughtUp int64
	firstBack := int64(math.MaxInt64)
	for seq := aFrom; seq < bTo; seq++ {
		t := b.sink.at(0, seq)
		caughtUp = max(caughtUp, t)
		if t >= upAt.UnixNano() {
			firstBack = min(firstBack, t)
		}
	}
	reorder, dups := b.sink.reorder[0], b.sink.dups[0]
	b.sink.mu.Unlock()

	rate := func(from, to int, s, e time.Time) float64 {
		return float64(b.deliveriesBetween(others, from, to, s, e)) / e.Sub(s).Seconds()
	}
	ra, rb := rate(aFrom, aTo, aStart, aEnd), rate(bFrom, bTo, bStart, bEnd)
	la, _ := b.fanoutLatency(others, aFrom, aTo)
	lb, _ := b.fanoutLatency(others, bFrom, bTo)
	fmt.Printf("\n## one endpoint down for %v among %d subscriptions (%g records/s)\n\n", b.c.down, b.c.subs, b.c.rate)
	fmt.Printf("| the other %d | all up (%v) | one down (%v) | down ÷ up | target | |\n", len(others), b.c.load, b.c.down)
	fmt.Println("|---|---|---|---|---|---|")
	fmt.Printf("| deliveries/s while producing | %.1f | %.1f | %.3f | ≥ 0.95 | %s |\n", ra, rb, rb/ra, verdict(rb/ra >= 0.95))
	b.record("the others' rate, one down ÷ all up", "", rb/ra)
	b.record("the others' fan-out p99, one down", "ms", float64(pct(lb, 0.99))/float64(time.Millisecond))
	fmt.Printf("| fan-out latency p50 | %v | %v | | | |\n", pct(la, 0.5), pct(lb, 0.5))
	fmt.Printf("| fan-out latency p99 | %v | %v | | | |\n", pct(la, 0.99), pct(lb, 0.99))
	fmt.Printf("| not delivered within %v | 0 | %d | | 0 | %s |\n", b.c.drain, leftOthers, verdict(leftOthers == 0))
	fmt.Println()
	fmt.Println("| the downed subscription | value | target | |")
	fmt.Println("|---|---|---|---|")
	fmt.Printf("| 503s answered | %d | | |\n", b.sink.refused.Load())
	det1, cu1 := b.totals()
	if firstBack != math.MaxInt64 {
		fmt.Printf("| first delivery after the endpoint came back | %v | | |\n", time.Duration(firstBack-upAt.UnixNano()).Round(time.Millisecond))
	}
	if leftDowned == 0 {
		b.record("the downed one caught up after it came back", "s", time.Duration(caughtUp-upAt.UnixNano()).Seconds())
		fmt.Printf("| caught up (its last record of the outage delivered) after the endpoint came back | %v | | |\n",
			time.Duration(caughtUp-upAt.UnixNano()).Round(time.Millisecond))
	}
	fmt.Printf("| records not delivered within %v | %d of %d | 0 | %s |\n", max(b.c.drain, b.c.down), leftDowned, bTo-aFrom, verdict(leftDowned == 0))
	fmt.Printf("| per-key order violations (during the catch-up) | %d (%d) | 0 | %s |\n", reorder, reorder-reorderBefore, verdict(reorder == 0))
	fmt.Printf("| duplicates | %d | | |\n", dups)
	fmt.Printf("| cursors detached / records read by catch-ups (--shared-read), from the outage on | %.0f / %.0f | | |\n", det1-det0, cu1-cu0)
	return nil
}
