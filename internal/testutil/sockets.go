package testutil

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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

// SocketOwners answers SocketOwner for many sinks at once from one scan of
// /proc: a scenario with many subscriptions opens hundreds of connections
// in bursts, and a scan per connection (every socket of the machine, every
// file descriptor of every node) would cost seconds of CPU each burst.
// A lookup that misses the last scan scans again; each answer is handed
// out once, since every connection is looked up once, when accepted, and
// its client port may later be reused by another process.
type SocketOwners struct {
	mu sync.Mutex // guards the fields below and serialises scans
	// byPorts is the inode of each socket of the last scan, by its local
	// and remote port; byInode the pid holding each socket inode.
	byPorts map[[2]int]string
	byInode map[string]int
}

// Lookup returns which of pids holds the socket connected from client to
// server, as SocketOwner does.
func (o *SocketOwners) Lookup(client, server net.Addr, pids []int) (int, bool) {
	cport, ok1 := portOf(client)
	sport, ok2 := portOf(server)
	if !ok1 || !ok2 {
		return 0, false
	}
	k := [2]int{cport, sport}
	o.mu.Lock()
	defer o.mu.Unlock()
	for scanned := false; ; scanned = true {
		if inode, ok := o.byPorts[k]; ok {
			if pid, ok := o.byInode[inode]; ok {
				delete(o.byPorts, k)
				return pid, true
			}
		}
		if scanned {
			return 0, false
		}
		o.scan(pids)
	}
}

// scan reads every TCP socket's ports and inode, and every socket inode
// each of pids holds.
func (o *SocketOwners) scan(pids []int) {
	o.byPorts = make(map[[2]int]string)
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[0] == "sl" || fields[9] == "0" {
				continue
			}
			o.byPorts[[2]int{hexPort(fields[1]), hexPort(fields[2])}] = fields[9]
		}
		f.Close()
	}
	o.byInode = make(map[string]int)
	for _, pid := range pids {
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			l, err := os.Readlink(filepath.Join(dir, fd.Name()))
			if inode, ok := strings.CutPrefix(l, "socket:["); err == nil && ok {
				o.byInode[strings.TrimSuffix(inode, "]")] = pid
			}
		}
	}
}
