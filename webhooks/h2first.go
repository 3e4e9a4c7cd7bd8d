package webhooks

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
)

// errNoHTTP2 is what the HTTP/2 transport's dial returns for an https
// endpoint that did not choose "h2" in the handshake: the request then
// goes to the http1 client, within the same attempt, since nothing of it
// was written.
var errNoHTTP2 = errors.New("webhooks: the endpoint does not speak HTTP/2")

// HTTPS endpoints are spoken to over HTTP/2 where they speak it, and over
// the http1 client where they do not; net/http's own HTTP/1 connections
// are never used for them unless the endpoint needs net/http (client
// certificates, redirects, AWS signatures) or --endpoint-net-http says so.
// Why: net/http returns an HTTP/1 connection to its pool when a body ends,
// before its read loop has looked at the bytes behind it, so a request
// taking it in between can read another request's forged answer as its
// own; HTTP/2 frames belong to their stream and cannot be mistaken that
// way, and the http1 client checks every idle connection before reuse.
// HTTP/2 first also keeps one multiplexed connection per endpoint instead
// of one per request in flight.

// newHTTP2Transport returns a clone of tr whose TLS dial offers "h2"
// alone and fails with errNoHTTP2 unless the endpoint chose it, so the
// transport only ever speaks HTTP/2. dial is the checked dialer of every
// other connection, so the address policy holds at every dial.
func newHTTP2Transport(tr *http.Transport, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *http.Transport {
	h2 := tr.Clone()
	h2.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		nc, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cfg := tr.TLSClientConfig.Clone()
		// An IP address is verified against the certificate's IP names
		// and not sent as SNI, as net/http does.
		cfg.ServerName = host
		cfg.NextProtos = []string{"h2"}
		hctx, cancel := context.WithTimeout(ctx, tr.TLSHandshakeTimeout)
		defer cancel()
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(hctx); err != nil {
			nc.Close()
			if refusedProtocol(err) {
				return nil, fmt.Errorf("%w: %w", errNoHTTP2, err)
			}
			return nil, err
		}
		if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
			nc.Close()
			return nil, fmt.Errorf("%w: it chose %q", errNoHTTP2, p)
		}
		return tc, nil
	}
	return h2
}

// refusedProtocol reports the endpoint's no_application_protocol alert
// (RFC 7301), which crypto/tls reports as a remote error of an
// unexported type: only its text names it.
func refusedProtocol(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "remote error" && oe.Err != nil && oe.Err.Error() == "tls: no application protocol"
}
