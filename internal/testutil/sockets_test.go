package testutil

import (
	"net"
	"os"
	"strconv"
	"testing"
)

// SocketOwners finds the process of every connection (the kernel's
// sock_diag names the same socket /proc/net/tcp does), and nothing among pids that
// do not hold it.
func TestSocketOwnersNamesTheProcessOfEachConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns []net.Conn
	for range 5 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		conns = append(conns, s)
	}
	for i, s := range conns {
		c, srv := s.RemoteAddr().(*net.TCPAddr), s.LocalAddr().(*net.TCPAddr)
		inode, err := socketInodeDiag(c, srv)
		if want := socketInode("/proc/net/tcp", c.Port, srv.Port); err != nil || strconv.FormatUint(uint64(inode), 10) != want {
			t.Errorf("connection %d: sock_diag says inode %d (%v), /proc/net/tcp %s", i, inode, err, want)
		}
	}
	var owners SocketOwners
	me := os.Getpid()
	for i, s := range conns {
		pid, ok := owners.Lookup(s.RemoteAddr(), s.LocalAddr(), []int{me})
		if !ok || pid != me {
			t.Errorf("connection %d: owner %d, %v; want %d", i, pid, ok, me)
		}
	}
	if _, ok := owners.Lookup(conns[0].RemoteAddr(), conns[0].LocalAddr(), []int{os.Getppid()}); ok {
		t.Errorf("connection 0 found among pids that do not hold it")
	}
}
