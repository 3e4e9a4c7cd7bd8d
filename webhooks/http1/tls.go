package http1

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"
)

// ErrNoHTTP1 is returned when an https endpoint refuses HTTP/1.1 in the
// handshake (the no_application_protocol alert to an offer of
// "http/1.1" alone): an endpoint that speaks only HTTP/2, for a client
// that does to send to instead. Nothing of the request was written.
var ErrNoHTTP1 = errors.New("http1: the endpoint does not speak HTTP/1.1 over TLS")

// tlsSettleWait is how long an idle TLS connection whose socket has bytes
// is read to see whether they are records of TLS alone (a session ticket
// the server sent late, a key update): those leave the connection
// usable, anything else closes it.
const tlsSettleWait = time.Millisecond

// handshake makes nc a TLS connection to addr's host, offering only
// HTTP/1.1, by deadline and within Config.TLSHandshakeTimeout.
func (c *Client) handshake(ctx context.Context, deadline time.Time, nc net.Conn, addr string) (*tlsSide, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var cfg *tls.Config
	if c.cfg.TLS != nil {
		cfg = c.cfg.TLS.Clone()
	} else {
		cfg = &tls.Config{}
	}
	// An IP address is verified against the certificate's IP names and
	// not sent as SNI, as net/http does.
	cfg.ServerName = host
	cfg.NextProtos = []string{"http/1.1"}
	if t := c.cfg.TLSHandshakeTimeout; t > 0 {
		if d := time.Now().Add(t); d.Before(deadline) {
			deadline = d
		}
	}
	hctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	rec := &recordReader{Conn: nc}
	tc := tls.Client(rec, cfg)
	if err := tc.HandshakeContext(hctx); err != nil {
		switch {
		case refusedHTTP1(err):
			return nil, fmt.Errorf("%w: %w", ErrNoHTTP1, err)
		case hctx.Err() != nil && ctx.Err() == nil:
			return nil, fmt.Errorf("%w: tls handshake: %w", context.DeadlineExceeded, err)
		}
		return nil, err
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != "" && p != "http/1.1" {
		return nil, fmt.Errorf("%w: it chose %q", ErrNoHTTP1, p)
	}
	return &tlsSide{tc: tc, rec: rec}, nil
}

// refusedHTTP1 reports the endpoint's no_application_protocol alert
// (RFC 7301), which crypto/tls reports as a remote error of an
// unexported type: only its text names it.
func refusedHTTP1(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "remote error" && oe.Err != nil && oe.Err.Error() == "tls: no application protocol"
}

// tlsSide is the TLS layer of a connection, what its idle check asks
// beyond the socket. Used by the goroutine holding the connection only.
type tlsSide struct {
	tc  *tls.Conn
	rec *recordReader
	b   [1]byte
}

// quiet reports whether an idle TLS connection holds nothing for a
// request to take as its answer. A read that must not wait (a deadline
// in the past) gives up what the TLS layer decrypted and nobody read, and
// handles the records it holds whole; when the socket has bytes
// (socketReady), the read waits tlsSettleWait for them. Records of TLS
// alone (a session ticket, a key update) are handled by the read and
// leave nothing; application data, an alert or the endpoint's close
// make the connection unusable, and so do bytes of a record not yet
// whole, which the next read could complete.
func (s *tlsSide) quiet(socketReady bool) bool {
	wait := aLongTimeAgo
	if socketReady {
		wait = time.Now().Add(tlsSettleWait)
	}
	if err := s.tc.SetReadDeadline(wait); err != nil {
		return false
	}
	n, err := s.tc.Read(s.b[:])
	if n > 0 || !IsTimeout(err) || s.tc.SetReadDeadline(time.Time{}) != nil {
		return false
	}
	return s.rec.atBoundary()
}

// recordReader reads the socket under a TLS connection and follows the
// record framing of what it read (a 5-byte header whose last two bytes
// are the length of the record that follows), so that the idle check
// can tell whether the TLS layer holds part of a record: only at a
// boundary has everything read been handled.
type recordReader struct {
	net.Conn
	// head counts the header bytes of the next record read so far, hdr
	// holding them; body is how much of the current record is unread.
	head int
	hdr  [5]byte
	body int
}

func (r *recordReader) Read(b []byte) (int, error) {
	n, err := r.Conn.Read(b)
	r.follow(b[:n])
	return n, err
}

// follow advances the framing over p.
func (r *recordReader) follow(p []byte) {
	for len(p) > 0 {
		if r.body > 0 {
			k := min(r.body, len(p))
			r.body -= k
			p = p[k:]
			continue
		}
		k := copy(r.hdr[r.head:], p)
		r.head += k
		p = p[k:]
		if r.head == len(r.hdr) {
			r.head, r.body = 0, int(r.hdr[3])<<8|int(r.hdr[4])
		}
	}
}

// atBoundary reports whether every byte read belongs to a whole record.
func (r *recordReader) atBoundary() bool { return r.head == 0 && r.body == 0 }
