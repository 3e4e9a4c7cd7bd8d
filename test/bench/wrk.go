package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// The wrk contender cross-checks ceiling A with a load generator that is
// not keyhook's code: wrk posts every record's body to the same sink over
// max_in_flight keep-alive connections, each body once, without Kafka,
// Redis, signatures or keyhook's headers. It runs when wrk is on PATH
// (Debian package wrk) and is reported skipped otherwise. Its bodies are
// rendered before it starts, so its end-to-end latencies count the time
// a body waited for its turn.

const modeWrk = "wrk"

var cWrk = contender{Name: "ceiling A (wrk)", Mode: modeWrk}

// wrkScript gives each of wrk's threads every threads-th body of the file
// (fixed size), in order, and then again from its first: wrk cannot stop
// once every body was sent, and a body whose request was lost (a
// connection wrk dropped) must still reach the sink. The sink counts a
// body once; the laps after the first are its duplicates.
const wrkScript = `
local counter = 0
function setup(thread)
  thread:set("tid", counter)
  counter = counter + 1
end

function init(args)
  local path, size, threads = args[1], tonumber(args[2]), tonumber(args[3])
  bodies, next_body = {}, 1
  local f = assert(io.open(path, "rb"))
  local id = 0
  while true do
    local b = f:read(size)
    if not b or #b < size then break end
    if id % threads == tid then bodies[#bodies + 1] = b end
    id = id + 1
  end
  f:close()
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/octet-stream"
end

function request()
  local b = bodies[(next_body - 1) % #bodies + 1]
  next_body = next_body + 1
  return wrk.format(nil, nil, nil, b)
end
`

// wrkThreads is wrk's thread count: one per core of the bench machine
// is what wrk's own guidance asks for, and the bench targets 2 cores.
const wrkThreads = 2

func runWrk(ctx context.Context, spec childSpec, out *childOut, rep *childReport) error {
	dir, err := os.MkdirTemp("", "keyhook-bench-wrk-")
	if err != nil {
		return fmt.Errorf("bench: wrk: %w", err)
	}
	defer os.RemoveAll(dir)
	d := newDataset(spec.Data)
	var bodies bytes.Buffer
	now := time.Now()
	size := 0
	for id := range d.spec.Records {
		b := d.body(id, now)
		size = len(b)
		bodies.Write(b)
	}
	bodiesPath, scriptPath := filepath.Join(dir, "bodies"), filepath.Join(dir, "post.lua")
	if err := os.WriteFile(bodiesPath, bodies.Bytes(), 0o600); err != nil {
		return fmt.Errorf("bench: wrk: %w", err)
	}
	if err := os.WriteFile(scriptPath, []byte(wrkScript), 0o600); err != nil {
		return fmt.Errorf("bench: wrk: %w", err)
	}
	threads := min(wrkThreads, spec.MaxInFlight)
	cmd := exec.Command("wrk", "-t", strconv.Itoa(threads), "-c", strconv.Itoa(spec.MaxInFlight),
		"-d", "1h", "--timeout", "30s", "-s", scriptPath, spec.SinkURL, "--",
		bodiesPath, strconv.Itoa(size), strconv.Itoa(threads))
	var summary bytes.Buffer
	cmd.Stdout, cmd.Stderr = &summary, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("bench: start wrk: %w", err)
	}
	pid := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	var mu sync.Mutex
	wrkCPU := int64(0)
	g := func(s *sample) {
		mu.Lock()
		defer mu.Unlock()
		if ns, ok := procCPU(pid); ok {
			wrkCPU = ns
		}
		s.CPU += wrkCPU
	}
	smp := startSampler(ctx, spec.SampleEvery, g)
	out.line(lineReady)
	var runErr error
	select {
	case <-ctx.Done():
		_ = cmd.Process.Signal(syscall.SIGINT) // wrk prints its summary and exits
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	case err := <-exited:
		runErr = fmt.Errorf("bench: wrk ended on its own: %v", err)
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru) == nil {
		mu.Lock()
		wrkCPU = max(wrkCPU, ru.Utime.Nano()+ru.Stime.Nano())
		mu.Unlock()
	}
	// wrk's own summary goes to children.log, for its requests/s.
	sc := bufio.NewScanner(&summary)
	for sc.Scan() {
		fmt.Fprintln(os.Stderr, "wrk:", sc.Text())
	}
	rep.Samples = smp.wait(g)
	return runErr
}
