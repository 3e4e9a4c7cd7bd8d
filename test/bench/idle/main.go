// Command idle measures what idle subscriptions cost a keyhook node: it
// starts a real `keyhook serve` process (the binary given, so the same
// program measures two builds), creates N subscriptions on one topic
// with no records, lets the groups settle, and prints per subscription
// the node's goroutines, RSS, CPU per second and established broker
// connections, over the node with none. Subscriptions live in Redis:
// give each run an empty database (the URL's /db), or the node starts
// with the earlier run's.
//
//	go build -o /tmp/keyhook ./cmd/keyhook
//	export "$(scripts/kafka.sh start | tail -n 1)"; redis-server --port 6390 &
//	go run ./test/bench/idle -bin /tmp/keyhook -redis redis://127.0.0.1:6390/1 -n 100
//	go run ./test/bench/idle -bin /tmp/keyhook -redis redis://127.0.0.1:6390/2 -n 100 -args --shared-read=false
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/auth"
	"github.com/keyhook/keyhook/test/bench/serve"
)

func main() {
	bin := flag.String("bin", "", "the keyhook binary to measure (required)")
	brokers := flag.String("brokers", os.Getenv("KEYHOOK_TEST_KAFKA_BROKERS"), "the Kafka broker")
	redisURL := flag.String("redis", "redis://127.0.0.1:6379/0", "the Redis URL")
	n := flag.Int("n", 100, "idle subscriptions")
	partitions := flag.Int("partitions", 8, "partitions of the topic")
	settle := flag.Duration("settle", 60*time.Second, "wait after the subscriptions were created")
	window := flag.Duration("window", 30*time.Second, "the idle CPU is measured over this")
	addr := flag.String("addr", "127.0.0.1:18480", "the node's HTTP address")
	extra := flag.String("args", "", "more flags for keyhook serve, space-separated (e.g. --shared-read=false)")
	flag.Parse()
	if *bin == "" || *brokers == "" {
		fmt.Fprintln(os.Stderr, "idle: -bin and -brokers (or KEYHOOK_TEST_KAFKA_BROKERS) are required")
		os.Exit(2)
	}
	if err := run(*bin, *brokers, *redisURL, *addr, strings.Fields(*extra), *n, *partitions, *settle, *window); err != nil {
		fmt.Fprintln(os.Stderr, "idle:", err)
		os.Exit(1)
	}
}

func run(bin, brokers, redisURL, addr string, extra []string, n, partitions int, settle, window time.Duration) error {
	ctx := context.Background()
	stamp := strconv.FormatInt(time.Now().UnixNano(), 36)
	topic := "idle-" + stamp
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	if err != nil {
		return err
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, int32(partitions), 1, nil, topic); err != nil {
		return fmt.Errorf("create topic: %w", err)
	}
	token := auth.Generate()
	dir, err := os.MkdirTemp("", "keyhook-idle-")
	if err != nil {
		return err
	}
	args := append([]string{"serve", "--kafka-brokers", brokers, "--redis-url", redisURL,
		"--http-addr", addr, "--allow-private-endpoints", "--metrics-public",
		"--config-topic", "_keyhook_config_" + stamp, "--node-id", "idle-" + stamp}, extra...)
	node, err := serve.Start(bin, args, []string{"KEYHOOK_BOOTSTRAP_TOKEN=" + token}, addr, filepath.Join(dir, "node.log"))
	if err != nil {
		return err
	}
	defer node.Close()
	base := node.Base
	_, port, _ := net.SplitHostPort(strings.Split(brokers, ",")[0])
	time.Sleep(5 * time.Second)
	zeros, err := serve.Measure(ctx, []*serve.Node{node}, port, window)
	if err != nil {
		return err
	}
	for i := range n {
		body := fmt.Sprintf(`{"name":"idle-%d","topics":[%q],"endpoint":{"url":"http://127.0.0.1:9/hook"}}`, i, topic)
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/subscriptions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("create subscription %d: %s", i, resp.Status)
		}
	}
	time.Sleep(settle)
	idles, err := serve.Measure(ctx, []*serve.Node{node}, port, window)
	if err != nil {
		return err
	}
	zero, idle := zeros[0], idles[0]
	per := func(a, b float64) float64 { return (b - a) / float64(n) }
	fmt.Printf("binary %s %s, %d idle subscriptions on one %d-partition topic, node log %s\n", bin, strings.Join(extra, " "), n, partitions, node.Log)
	fmt.Printf("%-28s %14s %14s %16s\n", "", "no subscription", fmt.Sprintf("%d subscriptions", n), "per subscription")
	fmt.Printf("%-28s %14.0f %14.0f %16.1f\n", "goroutines", zero.Goroutines, idle.Goroutines, per(zero.Goroutines, idle.Goroutines))
	fmt.Printf("%-28s %14.1f %14.1f %16.3f\n", "RSS (MiB)", zero.RSS/(1<<20), idle.RSS/(1<<20), per(zero.RSS, idle.RSS)/(1<<20))
	fmt.Printf("%-28s %14.2f %14.2f %16.4f\n", "CPU idle (% of a core)", 100*zero.CPU, 100*idle.CPU, 100*per(zero.CPU, idle.CPU))
	fmt.Printf("%-28s %14.0f %14.0f %16.2f\n", "broker connections", zero.Conns, idle.Conns, per(zero.Conns, idle.Conns))
	return nil
}
