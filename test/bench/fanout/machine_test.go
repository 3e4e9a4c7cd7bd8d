package main

import (
	"net"
	"os"
	"testing"
)

func TestParseStatCPUCountsStealAsBusyAndIdleAndIOWaitAsNot(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	got, ok := parseStatCPU([]byte("cpu  100 5 40 800 20 3 2 30 0 0\ncpu0 50 2 20 400 10 1 1 15 0 0\n"))
	if !ok {
		t.Fatal("the aggregate line was not read")
	}
	if want := (machineTicks{busy: 180, total: 1000, steal: 30}); got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5 6 7 8\n", "cpu 1 2 x 4 5 6 7 8\n", "cpu 1 2 3\n"} {
		if _, ok := parseStatCPU([]byte(bad)); ok {
			t.Errorf("%q read as the aggregate line", bad)
		}
	}
}

func TestListenInodeFindsOnlyTheListeningSocketOfThePort(t *testing.T) {
	// Lines as /proc/net/tcp prints them: an established connection from
	// port 6397 (18FD), a listener on 6397, a listener on 6398.
	table := []byte(`  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:18FD 0100007F:D2B4 01 00000000:00000000 00:00000000 00000000     0        0 111 1 0 20 4 30 10 -1
   1: 0100007F:18FD 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 222 1 0 100 0 0 10 0
   2: 0100007F:18FE 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 333 1 0 100 0 0 10 0
`)
	if in, ok := listenInode(table, 6397); !ok || in != "222" {
		t.Fatalf("port 6397: got %q %v, want the listener's inode 222", in, ok)
	}
	if _, ok := listenInode(table, 6399); ok {
		t.Fatal("a port nobody listens on was found")
	}
}

func TestListenerPidFindsTheProcessListeningOnAPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		t.Skip("no /proc/net/tcp here")
	}
	port := l.Addr().(*net.TCPAddr).Port
	if got := listenerPid(port); got != os.Getpid() {
		t.Fatalf("listenerPid(%d) = %d, want this process %d", port, got, os.Getpid())
	}
}
