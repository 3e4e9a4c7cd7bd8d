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
//	go run ./test/bench/idle -bin /tmp/keyhook -redis redis://127.0.0.1:6390/2 -n 100 -args --shared-read
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/auth"
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
	extra := flag.String("args", "", "more flags for keyhook serve, space-separated (e.g. --shared-read)")
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

// sample is what the node costs at one moment.
type sample struct {
	goroutines, rss, conns float64
	cpu                    float64 // CPU seconds per second over the window
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
	logf, err := os.Create(filepath.Join(dir, "node.log"))
	if err != nil {
		return err
	}
	args := append([]string{"serve", "--kafka-brokers", brokers, "--redis-url", redisURL,
		"--http-addr", addr, "--allow-private-endpoints", "--metrics-public",
		"--config-topic", "_keyhook_config_" + stamp, "--node-id", "idle-" + stamp}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KEYHOOK_BOOTSTRAP_TOKEN="+token)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
		}
	}()
	base := "http://" + addr
	if err := waitUp(base); err != nil {
		return err
	}
	_, port, _ := net.SplitHostPort(strings.Split(brokers, ",")[0])
	time.Sleep(5 * time.Second)
	zero, err := measure(base, cmd.Process.Pid, port, window)
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
	idle, err := measure(base, cmd.Process.Pid, port, window)
	if err != nil {
		return err
	}
	per := func(a, b float64) float64 { return (b - a) / float64(n) }
	fmt.Printf("binary %s %s, %d idle subscriptions on one %d-partition topic, node log %s\n", bin, strings.Join(extra, " "), n, partitions, logf.Name())
	fmt.Printf("%-28s %14s %14s %16s\n", "", "no subscription", fmt.Sprintf("%d subscriptions", n), "per subscription")
	fmt.Printf("%-28s %14.0f %14.0f %16.1f\n", "goroutines", zero.goroutines, idle.goroutines, per(zero.goroutines, idle.goroutines))
	fmt.Printf("%-28s %14.1f %14.1f %16.3f\n", "RSS (MiB)", zero.rss/(1<<20), idle.rss/(1<<20), per(zero.rss, idle.rss)/(1<<20))
	fmt.Printf("%-28s %14.2f %14.2f %16.4f\n", "CPU idle (% of a core)", 100*zero.cpu, 100*idle.cpu, 100*per(zero.cpu, idle.cpu))
	fmt.Printf("%-28s %14.0f %14.0f %16.2f\n", "broker connections", zero.conns, idle.conns, per(zero.conns, idle.conns))
	return nil
}

func waitUp(base string) error {
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if resp, err := http.Get(base + "/metrics"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
	return fmt.Errorf("the node did not serve /metrics within 60s")
}

// measure reads the node's goroutines, RSS and connections, and its CPU
// over window.
func measure(base string, pid int, brokerPort string, window time.Duration) (sample, error) {
	c0, err := cpuSeconds(pid)
	if err != nil {
		return sample{}, err
	}
	t0 := time.Now()
	time.Sleep(window)
	c1, err := cpuSeconds(pid)
	if err != nil {
		return sample{}, err
	}
	s := sample{cpu: (c1 - c0) / time.Since(t0).Seconds()}
	m, err := metrics(base)
	if err != nil {
		return sample{}, err
	}
	s.goroutines, s.rss = m["go_goroutines"], m["process_resident_memory_bytes"]
	s.conns, err = brokerConns(pid, brokerPort)
	return s, err
}

// metrics reads the unlabelled series of /metrics.
func metrics(base string) (map[string]float64, error) {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if v, err := strconv.ParseFloat(f[1], 64); err == nil {
			out[f[0]] = v
		}
	}
	return out, sc.Err()
}

// cpuSeconds is the process's user and system CPU time.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100, nil // USER_HZ is 100 on Linux
}

// brokerConns counts the process's established TCP sockets to the
// broker's port.
func brokerConns(pid int, port string) (float64, error) {
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return 0, err
	}
	inodes := map[string]bool{}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[l[8:len(l)-1]] = true
		}
	}
	want := fmt.Sprintf(":%04X", p)
	n := 0
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			x := strings.Fields(line)
			// rem_address, st (01 established), inode
			if len(x) > 9 && strings.HasSuffix(x[2], want) && x[3] == "01" && inodes[x[9]] {
				n++
			}
		}
	}
	return float64(n), nil
}
