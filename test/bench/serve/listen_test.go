package serve

import (
	"net"
	"os"
	"testing"
)

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
		t.Skip("no /proc/net/tcp: not Linux, and ListenerPid reads /proc (CI runs on Linux and does not skip)")
	}
	port := l.Addr().(*net.TCPAddr).Port
	if got := ListenerPid(port); got != os.Getpid() {
		t.Fatalf("ListenerPid(%d) = %d, want this process %d", port, got, os.Getpid())
	}
}
