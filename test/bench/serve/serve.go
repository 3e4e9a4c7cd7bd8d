// Package serve runs `keyhook serve` processes for the benchmarks that
// measure a real node (test/bench/idle, test/bench/fanout) and reads what
// each costs: goroutines and RSS from its /metrics, CPU from /proc, and
// its established connections to the broker.
package serve

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Node is one `keyhook serve` process, started again by [Node.Restart]
// with the same flags. It is driven by one goroutine (the benchmark's).
type Node struct {
	// Base is the node's HTTP address as a URL, e.g. http://127.0.0.1:18480.
	Base string
	// Log is the file the process writes its output to, across restarts.
	Log string

	bin  string
	args []string
	env  []string
	logf *os.File
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// Start runs bin with args (serve and its flags; --http-addr among them
// names addr), the environment plus env, its output appended to logPath,
// and waits until it serves /metrics.
func Start(bin string, args, env []string, addr, logPath string) (*Node, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	n := &Node{Base: "http://" + addr, Log: logPath, bin: bin, args: args, env: env, logf: logf}
	if err := n.start(); err != nil {
		logf.Close()
		return nil, err
	}
	return n, nil
}

func (n *Node) start() error {
	cmd := exec.Command(n.bin, n.args...)
	cmd.Env = append(os.Environ(), n.env...)
	cmd.Stdout, cmd.Stderr = n.logf, n.logf
	if err := cmd.Start(); err != nil {
		return err
	}
	n.cmd, n.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(n.done) }()
	return n.WaitUp(90 * time.Second)
}

// Pid is the running process's id.
func (n *Node) Pid() int { return n.cmd.Process.Pid }

// WaitUp waits until the node serves /metrics, or fails when it exits or
// timeout passes.
func (n *Node) WaitUp(timeout time.Duration) error {
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		select {
		case <-n.done:
			return fmt.Errorf("%s exited (%v); see %s", n.bin, n.cmd.ProcessState, n.Log)
		default:
		}
		if resp, err := http.Get(n.Base + "/metrics"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
	return fmt.Errorf("the node at %s did not serve /metrics within %v; see %s", n.Base, timeout, n.Log)
}

// Stop sends sig and waits until the process exits, killing it after
// timeout. SIGKILL is a crash: nothing of the node's shutdown runs.
func (n *Node) Stop(sig syscall.Signal, timeout time.Duration) error {
	select {
	case <-n.done:
		return nil
	default:
	}
	if err := n.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-n.done:
		return nil
	case <-time.After(timeout):
		_ = n.cmd.Process.Kill()
		<-n.done
		return fmt.Errorf("%s did not exit within %v of %v; killed", n.Base, timeout, sig)
	}
}

// Restart starts the process again with the same flags once it has
// stopped, and waits until it serves.
func (n *Node) Restart() error {
	<-n.done
	return n.start()
}

// Close stops the node (SIGTERM, a minute to shut down) and closes its log.
func (n *Node) Close() {
	_ = n.Stop(syscall.SIGTERM, time.Minute)
	n.logf.Close()
}

// Sample is what a node costs at one moment.
type Sample struct {
	Goroutines, RSS, Conns float64
	CPU                    float64 // CPU seconds per second over the window
	// Series are the samples its /metrics served; Overflow those the
	// OpenTelemetry SDK merged for an instrument past its series cap
	// (otel_metric_overflow="true").
	Series, Overflow float64
}

// Measure reads each node's CPU over the same window, then its
// goroutines, RSS and established connections to brokerPort.
func Measure(ctx context.Context, nodes []*Node, brokerPort string, window time.Duration) ([]Sample, error) {
	cpu, err := MeasureCPU(ctx, nodes, window)
	if err != nil {
		return nil, err
	}
	out, err := Read(nodes, brokerPort)
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].CPU = cpu[i]
	}
	return out, nil
}

// MeasureCPU reads each node's CPU seconds per second over the same
// window, from /proc alone: unlike Read, it costs the nodes nothing, so
// it can run beside a latency measurement.
func MeasureCPU(ctx context.Context, nodes []*Node, window time.Duration) ([]float64, error) {
	c0 := make([]float64, len(nodes))
	for i, n := range nodes {
		c, err := CPUSeconds(n.Pid())
		if err != nil {
			return nil, err
		}
		c0[i] = c
	}
	t0 := time.Now()
	select {
	case <-time.After(window):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	took := time.Since(t0).Seconds()
	out := make([]float64, len(nodes))
	for i, n := range nodes {
		c1, err := CPUSeconds(n.Pid())
		if err != nil {
			return nil, err
		}
		out[i] = (c1 - c0[i]) / took
	}
	return out, nil
}

// Read reads each node's goroutines and RSS from its /metrics and its
// established connections to brokerPort; CPU is left zero. A scrape of a
// node with a thousand subscriptions takes it about a third of a second
// of CPU.
func Read(nodes []*Node, brokerPort string) ([]Sample, error) {
	out := make([]Sample, len(nodes))
	for i, n := range nodes {
		sc, err := scrape(n.Base)
		if err != nil {
			return nil, err
		}
		m := sc.unlabelled
		out[i].Goroutines, out[i].RSS = m["go_goroutines"], m["process_resident_memory_bytes"]
		out[i].Series, out[i].Overflow = float64(sc.series), float64(sc.overflow)
		if out[i].Conns, err = BrokerConns(n.Pid(), brokerPort); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Metrics reads the unlabelled series of a node's /metrics.
func Metrics(base string) (map[string]float64, error) {
	sc, err := scrape(base)
	return sc.unlabelled, err
}

// scraped is one read of a node's /metrics: its unlabelled series, and
// how many samples it served, of which how many overflow series.
type scraped struct {
	unlabelled       map[string]float64
	series, overflow int
}

func scrape(base string) (scraped, error) {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return scraped{}, err
	}
	defer resp.Body.Close()
	return parseScrape(resp.Body)
}

// parseScrape reads a Prometheus text exposition.
func parseScrape(r io.Reader) (scraped, error) {
	out := scraped{unlabelled: map[string]float64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		out.series++
		if strings.Contains(line, `otel_metric_overflow="true"`) {
			out.overflow++
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		if v, err := strconv.ParseFloat(f[1], 64); err == nil {
			out.unlabelled[f[0]] = v
		}
	}
	return out, sc.Err()
}

// Totals reads a node's /metrics and sums each family's series over
// their labels: keyhook_cursor_detaches_total{...} of every subscription
// and partition as one figure.
func Totals(base string) (map[string]float64, error) {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err == nil {
			out[name] += v
		}
	}
	return out, sc.Err()
}

// CPUSeconds is the process's user and system CPU time.
func CPUSeconds(pid int) (float64, error) {
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

// BrokerConns counts the process's established TCP sockets to the
// broker's port.
func BrokerConns(pid int, port string) (float64, error) {
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return 0, err
	}
	inodes := socketInodes(pid)
	want := fmt.Sprintf(":%04X", p)
	n := 0
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			continue
		}
		eachSocket(b, func(x []string) bool {
			// rem_address, st (01 established), inode
			if strings.HasSuffix(x[2], want) && x[3] == "01" && inodes[x[9]] {
				n++
			}
			return true
		})
	}
	return float64(n), nil
}

// ListenerPid is the process listening on the TCP port, 0 when no
// process visible here does.
func ListenerPid(port int) int {
	var inode string
	for _, t := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		if b, err := os.ReadFile(t); err == nil {
			if in, ok := listenInode(b, port); ok {
				inode = in
				break
			}
		}
	}
	if inode == "" {
		return 0
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if pid, err := strconv.Atoi(p.Name()); err == nil && socketInodes(pid)[inode] {
			return pid
		}
	}
	return 0
}

// listenInode finds the inode of the socket listening on port in a
// /proc/net/tcp or tcp6 table: local address hex:PORT, state 0A.
func listenInode(table []byte, port int) (inode string, ok bool) {
	want := fmt.Sprintf(":%04X", port)
	eachSocket(table, func(x []string) bool {
		if x[3] == "0A" && strings.HasSuffix(x[1], want) {
			inode, ok = x[9], true
			return false
		}
		return true
	})
	return inode, ok
}

// eachSocket calls f with the fields of each socket of a /proc/net/tcp or
// tcp6 table (local_address, rem_address, st, …, inode at 9) until f
// returns false.
func eachSocket(table []byte, f func(fields []string) bool) {
	lines := strings.Split(string(table), "\n")
	for _, line := range lines[1:] { // the header first
		if x := strings.Fields(line); len(x) > 9 && !f(x) {
			return
		}
	}
}

// socketInodes is the set of socket inodes pid has open.
func socketInodes(pid int) map[string]bool {
	inodes := map[string]bool{}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[l[8:len(l)-1]] = true
		}
	}
	return inodes
}
