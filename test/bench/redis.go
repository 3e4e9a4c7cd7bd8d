package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is a redis-server process the bench started, with
// persistence off, on a free loopback port.
type redisServer struct {
	addr string
	dir  string
	cmd  *exec.Cmd
}

// startRedis starts redis-server the way internal/testutil does for tests
// (which needs a testing.TB the bench does not have).
func startRedis() (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("bench: redis-server not found in PATH (apt-get install -y redis-server): %w", err)
	}
	dir, err := os.MkdirTemp("", "keyhook-bench-redis-")
	if err != nil {
		return nil, fmt.Errorf("bench: redis dir: %w", err)
	}
	for range 5 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(bin,
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir,
			"--protected-mode", "no")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, fmt.Errorf("bench: redis-server: %w", err)
		}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("bench: start redis-server: %w", err)
		}
		go func() { // drain, so the server never blocks on a full pipe
			s := bufio.NewScanner(out)
			for s.Scan() {
			}
		}()
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if waitDial(addr, 5*time.Second) {
			return &redisServer{addr: addr, dir: dir, cmd: cmd}, nil
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	_ = os.RemoveAll(dir)
	return nil, fmt.Errorf("bench: redis-server did not start")
}

// stop kills the server this bench started and removes its directory.
func (r *redisServer) stop() {
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
	}
	_ = os.RemoveAll(r.dir)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("bench: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func waitDial(addr string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// commandStats reads INFO commandstats: calls per command, every call
// counted, those a Lua script makes included.
func commandStats(ctx context.Context, c *redis.Client) (map[string]int64, error) {
	s, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("bench: info commandstats: %w", err)
	}
	out := make(map[string]int64)
	for line := range strings.SplitSeq(s, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for field := range strings.SplitSeq(rest, ",") {
			if v, ok := strings.CutPrefix(field, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err == nil {
					out[strings.TrimPrefix(name, "cmdstat_")] = n
				}
			}
		}
	}
	return out, nil
}

// redisMark is where a run's count of Redis commands starts: the server's
// counts and the bench's own sampler's.
type redisMark struct{ stats, sampler map[string]int64 }

func (h *harness) markRedis(ctx context.Context) (redisMark, error) {
	sampler := h.samplerCt.snapshot()
	stats, err := commandStats(ctx, h.rdb)
	return redisMark{stats: stats, sampler: sampler}, err
}

// countRedis sets r's Redis counts: the commands the server ran since m,
// less those of the bench's own sampler.
func (h *harness) countRedis(ctx context.Context, m redisMark, r *runResult) error {
	after, err := commandStats(ctx, h.rdb)
	if err != nil {
		return err
	}
	mine := h.samplerCt.snapshot()
	for k, v := range m.sampler {
		mine[k] -= v
	}
	delta := diffCommands(m.stats, after, mine)
	r.RedisCommands, r.RedisScripts, r.RedisByCommand = delta.total, delta.scripts, delta.byName
	return nil
}

// commandDelta is what the contender ran between two snapshots: every
// command but INFO (the bench's own snapshots), minus the commands the
// bench's own sampler sent.
type commandDelta struct {
	total   int64
	scripts int64 // EVALSHA and EVAL calls: round trips carrying a script
	byName  map[string]int64
}

func diffCommands(before, after map[string]int64, samplerCmds map[string]int64) commandDelta {
	d := commandDelta{byName: make(map[string]int64)}
	for name, n := range after {
		if name == "info" {
			continue
		}
		delta := n - before[name] - samplerCmds[name]
		if delta != 0 {
			d.byName[name] = delta
		}
		d.total += delta
		if name == "evalsha" || name == "eval" {
			d.scripts += delta
		}
	}
	return d
}

// countingHook counts, per command name, what a go-redis client sends, so
// the bench can take its own sampling out of the Redis command counts.
type countingHook struct {
	mu     sync.Mutex
	counts map[string]int64
}

func (h *countingHook) add(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.counts == nil {
		h.counts = make(map[string]int64)
	}
	h.counts[name]++
}

func (h *countingHook) snapshot() map[string]int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]int64, len(h.counts))
	for k, v := range h.counts {
		out[k] = v
	}
	return out
}

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.add(cmdName(cmd))
		return next(ctx, cmd)
	}
}

func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.add(cmdName(c))
		}
		return next(ctx, cmds)
	}
}

// cmdName is the commandstats name of cmd ("memory|usage" for
// subcommands, as Redis 7 reports them).
func cmdName(cmd redis.Cmder) string {
	name := strings.ToLower(cmd.Name())
	if name == "memory" {
		if args := cmd.Args(); len(args) > 1 {
			return name + "|" + strings.ToLower(fmt.Sprint(args[1]))
		}
	}
	return name
}
