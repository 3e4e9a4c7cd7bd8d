//go:build unix

package http1

import (
	"errors"
	"net"
	"syscall"
)

// readable reports whether nc has something to read, a byte or the
// endpoint's close, without waiting for it: a peek that leaves the byte
// where it is. err is set when the socket could not be asked. A
// connection that is not a socket (a test's pipe) cannot be asked and
// reports false.
func readable(nc net.Conn) (bool, error) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false, nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false, err
	}
	var ready bool
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EWOULDBLOCK), errors.Is(err, syscall.EINTR):
			ready = false // nothing yet: the connection is as it was left
		default:
			ready = err != nil || n >= 0 // a byte, the close (n == 0) or a failure
		}
		return true // never wait: an idle connection is asked, not read
	})
	return ready, err
}
