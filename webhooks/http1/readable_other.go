//go:build !unix

package http1

import "net"

// idleCheck cannot peek at a socket here without reading it: an idle
// connection is checked only for bytes already buffered.
type idleCheck struct{}

func newIdleCheck(net.Conn) *idleCheck { return nil }

func (*idleCheck) readable() (bool, error) { return false, nil }
