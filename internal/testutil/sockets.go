package testutil

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// SocketOwner returns which of pids holds the TCP socket connected from
// client to server, as Linux's /proc says (the socket's inode in
// /proc/net/tcp{,6}, then the process whose file descriptors include it).
// A sink calls it for each connection it accepts (Sink.SetOrigin), so the
// deliveries of several keyhook processes sharing one endpoint can be told
// apart: the requests themselves do not name their node. It returns false
// when the socket or its process is not found (another OS, the process
// gone already).
func SocketOwner(client, server net.Addr, pids []int) (int, bool) {
	cport, ok1 := portOf(client)
	sport, ok2 := portOf(server)
	if !ok1 || !ok2 {
		return 0, false
	}
	inode := ""
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		if inode = socketInode(f, cport, sport); inode != "" {
			break
		}
	}
	if inode == "" {
		return 0, false
	}
	want := "socket:[" + inode + "]"
	for _, pid := range pids {
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if l, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name())); err == nil && l == want {
				return pid, true
			}
		}
	}
	return 0, false
}

func portOf(a net.Addr) (int, bool) {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.Port, true
	}
	_, p, err := net.SplitHostPort(a.String())
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(p)
	return n, err == nil
}

// socketInode finds, in a /proc/net/tcp table, the socket whose local port
// is local and remote port remote, and returns its inode ("" if none).
// Lines read "sl local_address rem_address st … uid timeout inode …" with
// addresses as hex IP:hex port.
func socketInode(table string, local, remote int) string {
	f, err := os.Open(table)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[0] == "sl" {
			continue
		}
		if hexPort(fields[1]) == local && hexPort(fields[2]) == remote && fields[9] != "0" {
			return fields[9]
		}
	}
	return ""
}

func hexPort(addr string) int {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return -1
	}
	n, err := strconv.ParseUint(addr[i+1:], 16, 16)
	if err != nil {
		return -1
	}
	return int(n)
}

// SocketOwners answers SocketOwner for many sinks at once, fast enough
// for the accept loops that call it: a scenario with many subscriptions
// opens hundreds of connections in bursts, and reading /proc/net/tcp per
// connection is slow once a long suite has left thousands of sockets
// behind (the kernel walks the whole table per read), slow enough that
// the sinks' accept loops fell minutes behind. It asks the kernel for the
// one socket (sock_diag over netlink, an exact lookup) and keeps which
// process holds each socket inode from its scans of /proc/<pid>/fd,
// scanning again, newest process first, only for an inode it has not
// seen.
type SocketOwners struct {
	mu sync.Mutex // guards byInode and serialises scans
	// byInode is the pid holding each socket inode seen by a scan; the
	// kernel numbers socket inodes from a counter, so none is reused by
	// another socket within a test run.
	byInode map[uint32]int
}

// Lookup returns which of pids holds the socket connected from client to
// server, as SocketOwner does.
func (o *SocketOwners) Lookup(client, server net.Addr, pids []int) (int, bool) {
	c, ok1 := client.(*net.TCPAddr)
	s, ok2 := server.(*net.TCPAddr)
	if !ok1 || !ok2 || c.IP.To4() == nil || s.IP.To4() == nil {
		return SocketOwner(client, server, pids)
	}
	inode, err := socketInodeDiag(c, s)
	if err != nil || inode == 0 {
		return 0, false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if pid, ok := o.byInode[inode]; ok && slices.Contains(pids, pid) {
		return pid, true
	}
	if o.byInode == nil {
		o.byInode = make(map[uint32]int)
	}
	// Newest first: a new connection most likely comes from the process
	// started last.
	for i := len(pids) - 1; i >= 0; i-- {
		dir := fmt.Sprintf("/proc/%d/fd", pids[i])
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		found := false
		for _, fd := range fds {
			l, err := os.Readlink(filepath.Join(dir, fd.Name()))
			if err != nil {
				continue
			}
			if v, ok := strings.CutPrefix(l, "socket:["); ok {
				if n, err := strconv.ParseUint(strings.TrimSuffix(v, "]"), 10, 32); err == nil {
					o.byInode[uint32(n)] = pids[i]
					found = found || uint32(n) == inode
				}
			}
		}
		if found {
			return pids[i], true
		}
	}
	return 0, false
}

// socketInodeDiag asks the kernel (NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY,
// an exact lookup) for the inode of the IPv4 TCP socket whose local end
// is local and remote end remote.
func socketInodeDiag(local, remote *net.TCPAddr) (uint32, error) {
	const (
		netlinkSockDiag  = 4  // NETLINK_SOCK_DIAG
		sockDiagByFamily = 20 // SOCK_DIAG_BY_FAMILY
		hdrLen           = 16 // struct nlmsghdr
		reqLen           = 56 // struct inet_diag_req_v2
	)
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, netlinkSockDiag)
	if err != nil {
		return 0, err
	}
	defer syscall.Close(fd)
	// A reply that never comes must not hold an accept loop forever.
	tv := syscall.Timeval{Sec: 1}
	if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv); err != nil {
		return 0, err
	}
	msg := make([]byte, hdrLen+reqLen)
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], sockDiagByFamily)
	binary.NativeEndian.PutUint16(msg[6:], syscall.NLM_F_REQUEST)
	binary.NativeEndian.PutUint32(msg[8:], 1)
	req := msg[hdrLen:]
	req[0] = syscall.AF_INET
	req[1] = syscall.IPPROTO_TCP
	binary.NativeEndian.PutUint32(req[4:], 0xffffffff) // every state
	id := req[8:]                                      // struct inet_diag_sockid
	binary.BigEndian.PutUint16(id[0:], uint16(local.Port))
	binary.BigEndian.PutUint16(id[2:], uint16(remote.Port))
	copy(id[4:8], local.IP.To4())
	copy(id[20:24], remote.IP.To4())
	binary.NativeEndian.PutUint32(id[40:], 0xffffffff) // INET_DIAG_NOCOOKIE
	binary.NativeEndian.PutUint32(id[44:], 0xffffffff)
	if err := syscall.Sendto(fd, msg, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return 0, err
	}
	buf := make([]byte, 8192)
	n, _, err := syscall.Recvfrom(fd, buf, 0)
	if err != nil {
		return 0, err
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil {
		return 0, err
	}
	for _, m := range msgs {
		switch m.Header.Type {
		case syscall.NLMSG_ERROR:
			return 0, fmt.Errorf("sock_diag: socket not found")
		case sockDiagByFamily:
			// struct inet_diag_msg: 4 bytes, the sockid (48), expires,
			// rqueue, wqueue, uid, then the inode.
			if len(m.Data) >= 72 {
				return binary.NativeEndian.Uint32(m.Data[68:]), nil
			}
		}
	}
	return 0, fmt.Errorf("sock_diag: no answer")
}
