//go:build !unix

package http1

import "net"

// readable cannot peek at a socket here without reading it: an idle
// connection is checked only for bytes already buffered.
func readable(net.Conn) (bool, error) { return false, nil }
