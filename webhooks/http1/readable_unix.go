//go:build unix

package http1

import (
	"errors"
	"net"
	"syscall"
)

// idleCheck asks a connection's socket, without waiting, whether it has
// something to read, a byte or the endpoint's close: a peek that leaves
// the byte where it is. Made once per connection, so that asking costs
// no allocation.
type idleCheck struct {
	rc    syscall.RawConn
	peek  func(fd uintptr) bool
	ready bool
	b     [1]byte
}

// newIdleCheck returns the check of nc; nil for a connection that is not
// a socket (a test's pipe), which cannot be asked.
func newIdleCheck(nc net.Conn) *idleCheck {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	ic := &idleCheck{rc: rc}
	ic.peek = ic.peekFD
	return ic
}

// readable reports whether the socket has something to read; err is set
// when it could not be asked.
func (ic *idleCheck) readable() (bool, error) {
	if ic == nil {
		return false, nil
	}
	err := ic.rc.Read(ic.peek)
	return ic.ready, err
}

func (ic *idleCheck) peekFD(fd uintptr) bool {
	n, _, err := syscall.Recvfrom(int(fd), ic.b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	switch {
	case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EWOULDBLOCK), errors.Is(err, syscall.EINTR):
		ic.ready = false // nothing yet: the connection is as it was left
	default:
		ic.ready = err != nil || n >= 0 // a byte, the close (n == 0) or a failure
	}
	return true // never wait: an idle connection is asked, not read
}
