// Package testutil holds helpers shared by keyhook's tests: real servers
// started on free loopback ports and stopped with the test.
package testutil

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a real redis-server process owned by one test.
type Redis struct {
	Addr string
	Dir  string
	cmd  *exec.Cmd
	port int
	t    testing.TB
	// snapshots counts Snapshot calls, naming each copy.
	snapshots int
}

// URL returns the redis:// URL of the server, database 0.
func (r *Redis) URL() string { return "redis://" + r.Addr + "/0" }

// Client returns a go-redis client for the server, closed with the test.
func (r *Redis) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	r.t.Cleanup(func() { _ = c.Close() })
	return c
}

// StartRedis starts redis-server on a free loopback port with persistence
// off and stops it when the test ends. A machine without redis-server fails
// the test: the fast tier needs a real server (apt-get install redis-server).
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found in PATH (install it: apt-get install -y redis-server): %v", err)
	}
	r := &Redis{Dir: t.TempDir(), t: t}
	r.start(t, bin)
	t.Cleanup(r.stop)
	return r
}

// Restart kills the server and starts a new one on the same port. With
// keepData false the new server starts empty (no persistence).
func (r *Redis) Restart(keepData bool) {
	r.t.Helper()
	if keepData {
		c := redis.NewClient(&redis.Options{Addr: r.Addr})
		if err := c.Save(context.Background()).Err(); err != nil {
			r.t.Fatalf("redis SAVE: %v", err)
		}
		_ = c.Close()
	} else {
		_ = os.Remove(filepath.Join(r.Dir, "dump.rdb"))
	}
	r.stop()
	bin, _ := exec.LookPath("redis-server")
	r.start(r.t, bin)
}

// Pause freezes the server (SIGSTOP) until Continue: its connections stay
// open and nothing is answered, as when Redis hangs on a slow disk or the
// network drops its packets. A paused server is continued when the test
// ends, before it is stopped.
func (r *Redis) Pause() {
	r.t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		r.t.Fatalf("pause redis-server: %v", err)
	}
	r.t.Cleanup(r.Continue)
}

// Continue resumes a server Pause froze; it is a no-op otherwise.
func (r *Redis) Continue() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGCONT)
}

// Snapshot saves the server's data to disk (SAVE) and keeps a copy of that
// dump; it returns the copy's path for RestartFromSnapshot. The server goes
// on serving: what is written after the call is not in the snapshot.
func (r *Redis) Snapshot() string {
	r.t.Helper()
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer c.Close()
	if err := c.Save(context.Background()).Err(); err != nil {
		r.t.Fatalf("redis SAVE: %v", err)
	}
	r.snapshots++
	path := filepath.Join(r.Dir, fmt.Sprintf("snapshot-%d.rdb", r.snapshots))
	if err := copyFile(filepath.Join(r.Dir, "dump.rdb"), path); err != nil {
		r.t.Fatalf("redis snapshot: %v", err)
	}
	return path
}

// RestartFromSnapshot kills the server and starts a new one on the same port
// holding exactly the data of snapshot (a path Snapshot returned): every
// write made since the snapshot is gone, as after restoring a backup or
// failing over to a lagging replica.
func (r *Redis) RestartFromSnapshot(snapshot string) {
	r.t.Helper()
	r.stop()
	if err := copyFile(snapshot, filepath.Join(r.Dir, "dump.rdb")); err != nil {
		r.t.Fatalf("redis restore snapshot: %v", err)
	}
	bin, _ := exec.LookPath("redis-server")
	r.start(r.t, bin)
}

// copyFile copies src to dst, replacing dst.
func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := os.WriteFile(dst, data, 0o600); err != nil {
		return fmt.Errorf("copy to %s: %w", dst, err)
	}
	return nil
}

func (r *Redis) start(t testing.TB, bin string) {
	t.Helper()
	for try := 0; try < 5; try++ {
		port := r.port
		if port == 0 {
			port = FreePort(t)
		}
		cmd := exec.Command(bin,
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", r.Dir,
			"--dbfilename", "dump.rdb", "--protected-mode", "no")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatalf("start redis-server: %v", err)
		}
		go func() { // drain so the server never blocks on a full pipe
			s := bufio.NewScanner(out)
			for s.Scan() {
			}
		}()
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if waitDial(addr, 5*time.Second) {
			r.cmd, r.Addr, r.port = cmd, addr, port
			return
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if r.port != 0 {
			// Same port wanted (restart): give the kernel a moment and retry.
			time.Sleep(200 * time.Millisecond)
		}
	}
	t.Fatalf("redis-server did not start")
}

func (r *Redis) stop() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.cmd = nil
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
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

// String describes the server for test logs.
func (r *Redis) String() string { return fmt.Sprintf("redis-server %s (dir %s)", r.Addr, r.Dir) }
