package testutil

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

var build struct {
	once sync.Once
	path string
	err  error
}

// KeyhookBinary builds cmd/keyhook once per test process and returns its
// path. Fault tests run it as real processes they can kill.
func KeyhookBinary(t testing.TB) string {
	t.Helper()
	build.once.Do(func() {
		root, err := moduleRoot()
		if err != nil {
			build.err = err
			return
		}
		dir, err := os.MkdirTemp("", "keyhook-bin-")
		if err != nil {
			build.err = err
			return
		}
		build.path = filepath.Join(dir, "keyhook")
		cmd := exec.Command("go", "build", "-o", build.path, "./cmd/keyhook")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			build.err = fmt.Errorf("go build ./cmd/keyhook: %v\n%s", err, out)
		}
	})
	if build.err != nil {
		t.Fatalf("testutil: %v", build.err)
	}
	return build.path
}

// Process is a keyhook node running as its own OS process.
type Process struct {
	Name    string
	APIAddr string
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
	t       testing.TB
}

// StartKeyhook runs "keyhook serve" with the given flags plus an API on a
// free loopback port, logs to a file (printed when the test fails), and
// kills it when the test ends. It returns once the API answers /healthz.
func StartKeyhook(t testing.TB, name string, flags ...string) *Process {
	t.Helper()
	bin := KeyhookBinary(t)
	p := &Process{
		Name:    name,
		APIAddr: fmt.Sprintf("127.0.0.1:%d", FreePort(t)),
		LogPath: filepath.Join(t.TempDir(), name+".log"),
		done:    make(chan struct{}),
		t:       t,
	}
	logf, err := os.Create(p.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"serve", "--node-id", name, "--http-addr", p.APIAddr, "--allow-private-endpoints"}, flags...)
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		_ = logf.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Signal(syscall.SIGKILL)
		<-p.done
		if t.Failed() {
			t.Logf("%s log: %s", name, p.LogPath)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			log, _ := os.ReadFile(p.LogPath)
			t.Fatalf("%s exited at start:\n%s", name, log)
		default:
		}
		resp, err := http.Get("http://" + p.APIAddr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: API did not answer on %s within 30s (log %s)", name, p.APIAddr, p.LogPath)
	return nil
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Signal sends sig to the process (no-op once it exited).
func (p *Process) Signal(sig syscall.Signal) {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(sig)
	}
}

// Wait waits for the process to exit, up to timeout; false if it did not.
func (p *Process) Wait(timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	select {
	case <-p.done:
		return true
	case <-ctx.Done():
		return false
	}
}

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}
