package hostile_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/keyhook/keyhook/auth"
	"github.com/keyhook/keyhook/internal/testutil"
)

// maxGrowth is how much a node's resident memory may grow under an
// attack beyond what it had delivering normally: generous, since the
// figure is the kernel's and the collector's, not a count of bytes.
const maxGrowth = 200 << 20

// A node delivering a subscription of 256 records in flight to an
// endpoint that answers with a head that never ends, one of 100 MiB, or
// 103 answers without end keeps its memory bounded: each attempt reads
// the head's bound and gives up, while the demo subscription of keyhook
// dev goes on beside it. The node runs as its own process; its VmRSS is
// logged per attack:
//
//	go test ./test/hostile -run TestNodeMemoryUnderHeadAttacks -v
func TestNodeMemoryUnderHeadAttacks(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a keyhook node for half a minute")
	}
	var mode atomic.Value // the attack's name
	mode.Store("none")
	attacks := map[string]func(w io.Writer){
		"endless header": func(w io.Writer) {
			streamTo(w, "HTTP/1.1 200 OK\r\n", "X-Filler: "+strings.Repeat("a", 4000)+"\r\n", 0, "")
		},
		"100 MiB header": func(w io.Writer) {
			streamTo(w, "HTTP/1.1 200 OK\r\n", "X-Filler: "+strings.Repeat("a", 4000)+"\r\n", 100<<20, "\r\n")
		},
		"endless 103s": func(w io.Writer) {
			streamTo(w, "", "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n", 0, "")
		},
		"none": func(w io.Writer) {
			_, _ = io.WriteString(w, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
		},
		"endless header line": func(w io.Writer) {
			streamTo(w, "HTTP/1.1 200 OK\r\nX-Filler: ", strings.Repeat("a", 4000), 0, "")
		},
	}
	var served atomic.Int64
	ep := rawEndpoint(t, func(w io.Writer) {
		served.Add(1)
		attacks[mode.Load().(string)](w)
	})

	node := startDev(t)
	node.subscribe(t, fmt.Sprintf(`{"name":"hostile","topics":["orders"],"endpoint":{"url":"http://%s/hook"},"ordering":"none","max_in_flight":256,"start":"earliest"}`, ep))
	testutil.WaitFor(t, 30*time.Second, "the hostile endpoint to get requests", func() bool { return served.Load() > 0 })
	time.Sleep(3 * time.Second) // a baseline with the subscription delivering and failing
	base := node.rss(t)
	t.Logf("baseline (503s): VmRSS %d MiB", base>>20)
	for _, name := range []string{"endless header", "100 MiB header", "endless 103s", "endless header line"} {
		mode.Store(name)
		before := served.Load()
		peak := base
		for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			rss := node.rss(t)
			peak = max(peak, rss)
			if rss-base > maxGrowth {
				t.Fatalf("%s: VmRSS %d MiB, %d MiB over the baseline (bound %d MiB)", name, rss>>20, (rss-base)>>20, maxGrowth>>20)
			}
		}
		t.Logf("%s: %d attempts, peak VmRSS %d MiB (+%d MiB over the baseline)", name, served.Load()-before, peak>>20, (peak-base)>>20)
	}
	node.healthy(t)
}

// streamTo writes head, then chunk until a write fails or limit bytes
// went, then tail.
func streamTo(w io.Writer, head, chunk string, limit int64, tail string) {
	if _, err := io.WriteString(w, head); err != nil {
		return
	}
	endless(chunk, limit, tail)(w)
}

// rawEndpoint answers every request read with answer, one goroutine per
// connection, and returns its address.
func rawEndpoint(t *testing.T, answer func(w io.Writer)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			wg.Go(func() {
				defer nc.Close()
				br := bufio.NewReader(nc)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					answer(nc)
				}
			})
		}
	})
	return ln.Addr().String()
}

// devNode is a "keyhook dev" process: embedded Kafka and Redis, a demo
// producer and a demo subscription to a demo endpoint.
type devNode struct {
	cmd   *exec.Cmd
	api   string
	token string
	log   string
}

func startDev(t *testing.T) *devNode {
	t.Helper()
	n := &devNode{api: fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)), token: auth.Generate(),
		log: filepath.Join(t.TempDir(), "dev.log")}
	logf, err := os.Create(n.log)
	if err != nil {
		t.Fatal(err)
	}
	n.cmd = exec.Command(testutil.KeyhookBinary(t), "dev", "--http-addr", n.api, "--bootstrap-token", n.token, "--log-level", "warn")
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = n.cmd.Wait(); _ = logf.Close(); close(done) }()
	t.Cleanup(func() {
		_ = n.cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("keyhook dev log: %s", n.log)
		}
	})
	testutil.WaitFor(t, 60*time.Second, "keyhook dev's API", func() bool {
		resp, err := http.Get("http://" + n.api + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return n
}

func (n *devNode) do(t *testing.T, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+n.api+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+n.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (n *devNode) subscribe(t *testing.T, body string) {
	t.Helper()
	if status, b := n.do(t, http.MethodPost, "/v1/subscriptions", body); status != http.StatusCreated {
		t.Fatalf("create subscription: %d %s", status, b)
	}
}

// healthy checks the API still answers and the demo subscription is
// listed: the node did not fall over.
func (n *devNode) healthy(t *testing.T) {
	t.Helper()
	if status, b := n.do(t, http.MethodGet, "/v1/subscriptions", ""); status != http.StatusOK || !bytes.Contains(b, []byte(`"hostile"`)) {
		t.Errorf("list subscriptions after the attacks: %d %.300s", status, b)
	}
}

// rss is the node's resident memory, from /proc.
func (n *devNode) rss(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", n.cmd.Process.Pid))
	if err != nil {
		t.Fatalf("read the node's status: %v", err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in the node's status")
	return 0
}
