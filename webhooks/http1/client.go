package http1

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
)

// Defaults of Config, applied to fields left at their zero value.
const (
	DefaultIdleTimeout = 90 * time.Second
	DefaultMaxIdle     = 1 << 16
	// DefaultDrainBytes is how much of a response beyond what is kept is
	// read and thrown away so that its connection can carry the next
	// request. A longer body costs one new connection, cheaper than
	// reading it.
	DefaultDrainBytes = 1 << 20
	// DefaultMaxHeadBytes bounds an answer's head, every informational
	// answer before the final one included: net/http's default
	// (Transport.MaxResponseHeaderBytes).
	DefaultMaxHeadBytes = 10 << 20
	// DefaultBodyTimeout bounds the read of what follows the head: the
	// status has decided the attempt by then, and a body that never ends
	// must not hold the request for its whole deadline.
	DefaultBodyTimeout = 2 * time.Second
)

// maxInformational bounds the informational (1xx) answers read before
// the final one. net/http bounds them only by the head's bytes; a count
// stops an endpoint sending tiny ones for ever at no cost to one that
// sends a few (102 Processing while it works, 103 Early Hints).
const maxInformational = 100

// readBufferSize is each connection's read buffer: a webhook answer's
// status line and headers fit in it with room to spare.
const readBufferSize = 4 << 10

// maxCoalescedBody is the largest body copied behind the request's head so
// that both go out in one write; a longer one goes out in a second.
const maxCoalescedBody = 64 << 10

// maxKeptWriteBuffer bounds the write buffer a connection keeps between
// requests: one large request must not pin its size in every idle
// connection.
const maxKeptWriteBuffer = 2 * maxCoalescedBody

// Config tunes a [Client]. Dial is required.
type Config struct {
	// Dial opens a connection to addr ("host:port"). The caller's checks
	// of the destination belong in it: every connection is made by it.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// DialTimeout bounds one dial, within the request's deadline.
	// Default: the deadline alone.
	DialTimeout time.Duration
	// MaxIdlePerAddr bounds the idle connections kept per address. Every
	// connection a busy endpoint needs should stay open between requests;
	// the default (65,536) is no cap in practice.
	MaxIdlePerAddr int
	// IdleTimeout closes connections idle for longer. Default 90 s.
	IdleTimeout time.Duration
	// DrainBytes is how much of a response body beyond Request.MaxBody is
	// read so its connection can be reused. Default 1 MiB.
	DrainBytes int64
	// MaxHeadBytes bounds the bytes read before the body: the status
	// line and headers of the answer and of every informational answer
	// before it. Past it the request fails. Default 10 MiB, as net/http.
	MaxHeadBytes int64
	// BodyTimeout bounds the read of the body once the head is read,
	// within the request's deadline; a body cut by it is kept as far as
	// it came and its connection closed. Default 2 s.
	BodyTimeout time.Duration
	// TLS configures the connections of requests with Request.TLS: the
	// roots that verify the endpoint, the lowest version. Each connection
	// gets a copy naming the host of its address and offering HTTP/1.1
	// alone (ALPN). It is read at every handshake and must not change
	// while the client is in use. Nil: crypto/tls's defaults.
	TLS *tls.Config
	// TLSHandshakeTimeout bounds one handshake, within the request's
	// deadline. Default: the deadline alone.
	TLSHandshakeTimeout time.Duration
}

// Client posts requests over pooled connections. It is safe for
// concurrent use.
type Client struct {
	cfg Config
	// pools and tlsPools hold the idle connections of plain and TLS
	// requests: addr → *pool.
	pools, tlsPools sync.Map
}

// New returns a Client for cfg.
func New(cfg Config) (*Client, error) {
	switch {
	case cfg.Dial == nil:
		return nil, errors.New("http1: Dial is required")
	case cfg.MaxIdlePerAddr < 0, cfg.IdleTimeout < 0, cfg.DrainBytes < 0, cfg.DialTimeout < 0,
		cfg.MaxHeadBytes < 0, cfg.BodyTimeout < 0, cfg.TLSHandshakeTimeout < 0:
		return nil, errors.New("http1: limits must not be negative")
	}
	if cfg.MaxHeadBytes == 0 {
		cfg.MaxHeadBytes = DefaultMaxHeadBytes
	}
	if cfg.BodyTimeout == 0 {
		cfg.BodyTimeout = DefaultBodyTimeout
	}
	if cfg.MaxIdlePerAddr == 0 {
		cfg.MaxIdlePerAddr = DefaultMaxIdle
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.DrainBytes == 0 {
		cfg.DrainBytes = DefaultDrainBytes
	}
	return &Client{cfg: cfg}, nil
}

// Request is one POST.
type Request struct {
	// Addr is the "host:port" dialled.
	Addr string
	// TLS makes the connection TLS (Config.TLS), its certificate
	// verified for Addr's host. Connections are pooled per Addr and TLS.
	TLS bool
	// Host is sent as the Host header.
	Host string
	// Target is the request target: the path and query, "/" at least.
	Target string
	// Header holds the request's headers. Host, Content-Length,
	// Transfer-Encoding, Trailer and the hop-by-hop headers are the
	// client's own and skipped here.
	Header http.Header
	// Body is sent with its Content-Length.
	Body []byte
	// MaxBody is how many bytes of the response body are kept.
	MaxBody int64
}

// Response is what the endpoint answered.
type Response struct {
	// Status is the final status (informational 1xx answers are skipped).
	Status int
	// RetryAfter is the first Retry-After header's value, trimmed.
	RetryAfter string
	// ContentType is the first Content-Type header's value, trimmed, at
	// most 128 bytes.
	ContentType string
	// Body holds the first MaxBody bytes of the response body; read
	// errors after the headers are not reported, since the status already
	// says what the endpoint decided.
	Body []byte
	// Truncated reports that the body was longer than Body.
	Truncated bool
}

// ErrInvalidHeader is returned, before anything is sent, for a header
// name that is not a token or a value with control characters.
var ErrInvalidHeader = errors.New("http1: invalid header")

// Post sends r and reads the answer, all by deadline; cancelling ctx
// cancels it. A connection taken from the pool that the endpoint closed,
// or that holds bytes nobody asked for, is closed unused. A request is
// sent again, on a new connection, only when nothing of it was written;
// once a byte went out the endpoint may have acted on it, and the error
// is the caller's to judge, as net/http leaves it for a POST that is not
// replayable.
func (c *Client) Post(ctx context.Context, deadline time.Time, r *Request) (Response, error) {
	if err := checkHeaders(r.Header); err != nil {
		return Response{}, err
	}
	if err := ctx.Err(); err != nil {
		return Response{}, err // sent, it would only be cut short
	}
	p := c.pool(r.Addr, r.TLS)
	for try := 0; ; try++ {
		var cn *conn
		reused := try == 0 // a retry takes a new connection
		if reused {
			cn = p.get(c.cfg.IdleTimeout)
		}
		if cn == nil {
			var err error
			if cn, err = c.dial(ctx, deadline, r.Addr, r.TLS); err != nil {
				return Response{}, err
			}
			reused = false
		}
		resp, keep, err := cn.roundTrip(ctx, deadline, r, &c.cfg)
		if err == nil {
			// Bytes behind the answer are nobody's answer: left in the
			// buffer, the next request on the connection would take them
			// for its own.
			if keep && cn.br.Buffered() == 0 {
				p.put(cn, c.cfg.MaxIdlePerAddr, c.cfg.IdleTimeout)
			} else {
				cn.close()
			}
			return resp, nil
		}
		cn.close()
		var nw *nothingWrittenError
		if reused && errors.As(err, &nw) && ctx.Err() == nil && !IsTimeout(err) {
			// Closed by the endpoint while idle, and found so by the
			// write: those idle for as long are likely closed too (an
			// endpoint's idle timeout, or its restart).
			p.closeIdleSince(cn.idleAt)
			continue
		}
		return Response{}, err
	}
}

// nothingWrittenError is a write that failed before any byte of the
// request went out: the one failure after which a request may be sent
// again within the same attempt.
type nothingWrittenError struct{ err error }

func (e *nothingWrittenError) Error() string { return e.err.Error() }
func (e *nothingWrittenError) Unwrap() error { return e.err }

// ErrHeadTooLarge is returned when an answer's head, informational
// answers included, is longer than Config.MaxHeadBytes.
var ErrHeadTooLarge = errors.New("http1: response head too large")

// ErrTooManyInformational is returned when an endpoint sends more
// informational (1xx) answers before its final one than a request waits
// through.
var ErrTooManyInformational = errors.New("http1: too many informational (1xx) answers")

// CloseIdle closes every idle connection.
func (c *Client) CloseIdle() {
	for _, pools := range []*sync.Map{&c.pools, &c.tlsPools} {
		pools.Range(func(_, v any) bool {
			v.(*pool).closeAll()
			return true
		})
	}
}

func (c *Client) pool(addr string, secure bool) *pool {
	pools := &c.pools
	if secure {
		pools = &c.tlsPools
	}
	if v, ok := pools.Load(addr); ok {
		return v.(*pool)
	}
	v, _ := pools.LoadOrStore(addr, &pool{})
	return v.(*pool)
}

func (c *Client) dial(ctx context.Context, deadline time.Time, addr string, secure bool) (*conn, error) {
	if c.cfg.DialTimeout > 0 {
		if d := time.Now().Add(c.cfg.DialTimeout); d.Before(deadline) {
			deadline = d
		}
	}
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	nc, err := c.cfg.Dial(dctx, "tcp", addr)
	if err != nil {
		if dctx.Err() != nil && ctx.Err() == nil {
			return nil, fmt.Errorf("%w: dial: %w", context.DeadlineExceeded, err)
		}
		return nil, err
	}
	cn := &conn{nc: nc, raw: nc, limit: noLimit, idle: newIdleCheck(nc)}
	if secure {
		ts, err := c.handshake(ctx, deadline, nc, addr)
		if err != nil {
			_ = nc.Close()
			return nil, err
		}
		cn.nc, cn.tls = ts.tc, ts
	}
	cn.br = bufio.NewReaderSize(cn, readBufferSize)
	cn.cut = cn.cutIfEnded
	return cn, nil
}

// conn is one connection and its read buffer. limit is how many more
// bytes may be read from it: the head's allowance while a head is read,
// no limit otherwise. nc is what requests are written to and read from:
// raw, the socket, or for TLS the layer over it (tls, nil for plain).
type conn struct {
	nc     net.Conn
	raw    net.Conn
	tls    *tlsSide
	br     *bufio.Reader
	wbuf   []byte
	limit  int64
	idle   *idleCheck
	idleAt time.Time
	// watched is the context whose end cuts this connection's request
	// short, unwatch ends that, and cut, made once per connection, does
	// the cutting. The watch is kept from request to request while their
	// contexts end together (a partition's deliveries share one), so that
	// such a request costs no registration with its context, which took
	// a lock of the parent context every request in flight shares, and
	// allocated. A cut of an earlier watch, still under way when the
	// connection took a request of another context, finds that context
	// alive and does nothing.
	mu      sync.Mutex
	watched context.Context
	unwatch func() bool
	cut     func()
}

// watch makes the end of ctx cut the connection's requests short.
func (cn *conn) watch(ctx context.Context) {
	done := ctx.Done()
	if done == nil {
		cn.stopWatch()
		return
	}
	if cn.watched != nil && cn.watched.Done() == done {
		return
	}
	cn.stopWatch()
	cn.mu.Lock()
	cn.watched = ctx
	cn.mu.Unlock()
	cn.unwatch = context.AfterFunc(ctx, cn.cut)
}

// cutIfEnded cuts the request in progress short when the context watched
// now has ended.
func (cn *conn) cutIfEnded() {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.watched != nil && cn.watched.Err() != nil {
		_ = cn.nc.SetDeadline(aLongTimeAgo)
	}
}

// stopWatch ends the connection's watch.
func (cn *conn) stopWatch() {
	if cn.unwatch == nil {
		return
	}
	cn.unwatch()
	cn.unwatch = nil
	cn.mu.Lock()
	cn.watched = nil
	cn.mu.Unlock()
}

// noLimit is conn.limit outside a head.
const noLimit = math.MaxInt64

// errLimit is what a read past conn.limit returns; roundTrip names it.
var errLimit = errors.New("http1: read limit reached")

// Read reads from the connection within its limit, as net/http's
// persistConn does: the buffer above never holds more than the limit
// allowed.
func (cn *conn) Read(b []byte) (int, error) {
	if cn.limit <= 0 {
		return 0, errLimit
	}
	if int64(len(b)) > cn.limit {
		b = b[:cn.limit]
	}
	n, err := cn.nc.Read(b)
	cn.limit -= int64(n)
	return n, err
}

// usable reports whether an idle connection can carry a request: nothing
// buffered, and nothing to read on the socket, neither a byte nor the
// endpoint's close; for TLS, nothing in the TLS layer either, and bytes
// on the socket only if they are records of TLS alone (see
// tlsSide.quiet). net/http learns the same from the read it keeps
// posted on every idle connection.
func (cn *conn) usable() bool {
	if cn.br.Buffered() > 0 {
		return false
	}
	ready, err := cn.idle.readable()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// The end of the last request's context cut the deadline short
		// (see watch), and a socket past its deadline is not asked.
		_ = cn.nc.SetReadDeadline(time.Time{})
		ready, err = cn.idle.readable()
	}
	if err != nil {
		return false
	}
	if cn.tls == nil {
		return !ready
	}
	return cn.tls.quiet(ready)
}

// close closes the connection and lets its context go: a context that
// outlives its requests (a partition's) must not keep closed
// connections. The socket is closed without TLS's close_notify, which
// is written with a wait of up to 5 s, too long for an endpoint that
// does not read, under the pool's lock; HTTP/1.1 frames its own ends.
func (cn *conn) close() {
	cn.stopWatch()
	_ = cn.raw.Close()
}

// aLongTimeAgo is a deadline that has passed: setting it interrupts a
// blocked read or write at once.
var aLongTimeAgo = time.Unix(1, 0)

// roundTrip writes r and reads its answer. keep reports whether the
// connection can carry another request.
func (cn *conn) roundTrip(ctx context.Context, deadline time.Time, r *Request, cfg *Config) (resp Response, keep bool, err error) {
	// Watched first: a cut of an earlier watch lands before the deadline
	// is set, or not at all.
	cn.watch(ctx)
	if err := cn.nc.SetDeadline(deadline); err != nil {
		return Response{}, false, err
	}
	defer func() {
		if ctx.Err() != nil {
			// Ended: the deadline may have been moved to the past, and the
			// answer, if any, cut short.
			keep = false
			if err != nil {
				err = ctx.Err()
			}
		}
	}()
	if n, err := cn.write(r); err != nil {
		if n == 0 {
			return Response{}, false, &nothingWrittenError{err}
		}
		return Response{}, false, err
	}
	cn.limit = cfg.MaxHeadBytes
	defer func() { cn.limit = noLimit }()
	if _, err := cn.br.Peek(1); err != nil {
		return Response{}, false, err
	}
	if h, ok := parseFastHead(cn.br); ok {
		_, _ = cn.br.Discard(h.size) // buffered: cannot fail
		resp = Response{Status: h.status, RetryAfter: h.retryAfter, ContentType: h.contentType}
		keep = !h.close
		if h.length > 0 {
			cn.limit = noLimit
			cn.boundBody(ctx, deadline, cfg.BodyTimeout)
			resp.Body, resp.Truncated, keep = readFixed(cn.br, h.length, r.MaxBody, cfg.DrainBytes, keep)
		}
		return resp, keep, nil
	}
	hr, err := cn.readHead()
	if err != nil {
		if cn.limit <= 0 {
			return Response{}, false, fmt.Errorf("%w: more than %d bytes", ErrHeadTooLarge, cfg.MaxHeadBytes)
		}
		return Response{}, false, err
	}
	cn.limit = noLimit
	resp = Response{Status: hr.StatusCode, RetryAfter: hr.Header.Get("Retry-After"), ContentType: cutContentType(hr.Header.Get("Content-Type"))}
	keep = !hr.Close
	if hr.StatusCode == http.StatusSwitchingProtocols {
		return resp, false, nil // the connection speaks something else now
	}
	if hr.ContentLength == 0 || hr.Body == http.NoBody {
		return resp, keep, nil
	}
	if hr.ContentLength < 0 && len(hr.TransferEncoding) == 0 {
		keep = false // the body ends when the endpoint closes the connection
	}
	cn.boundBody(ctx, deadline, cfg.BodyTimeout)
	resp.Body, resp.Truncated, keep = readBody(hr, r.MaxBody, cfg.DrainBytes, keep)
	return resp, keep, nil
}

// boundBody gives the body at most d from now, within deadline: the head
// has decided the request, and the body only tells a few bytes more.
func (cn *conn) boundBody(ctx context.Context, deadline time.Time, d time.Duration) {
	bd := time.Now().Add(d)
	if !bd.Before(deadline) {
		return
	}
	_ = cn.nc.SetDeadline(bd)
	if ctx.Err() != nil {
		// A cut that landed before the new deadline must stay made.
		_ = cn.nc.SetDeadline(aLongTimeAgo)
	}
}

// readHead reads the answer's status line and headers, past a bounded
// number of informational (1xx) answers.
func (cn *conn) readHead() (*http.Response, error) {
	for range maxInformational + 1 {
		hr, err := http.ReadResponse(cn.br, nil)
		if err != nil {
			return nil, err
		}
		if hr.StatusCode >= 100 && hr.StatusCode <= 199 && hr.StatusCode != http.StatusSwitchingProtocols {
			continue
		}
		return hr, nil
	}
	return nil, fmt.Errorf("%w: more than %d", ErrTooManyInformational, maxInformational)
}

// readFixed keeps up to max bytes of a body of length bytes and drains up
// to drain more. keep turns false when the body was not read to its end.
func readFixed(br *bufio.Reader, length, max, drain int64, keep bool) (body []byte, truncated, stillKeep bool) {
	body = make([]byte, min(length, max))
	n, err := io.ReadFull(br, body)
	body = body[:n]
	if err != nil {
		return body, false, false
	}
	rest := length - int64(n)
	if rest == 0 {
		return body, false, keep
	}
	if rest > drain {
		return body, true, false // cheaper to dial again than to read it
	}
	_, err = br.Discard(int(rest))
	return body, true, keep && err == nil
}

// readBody keeps up to max bytes of hr's body and drains up to drain more.
// keep turns false when the body was not read to its end.
func readBody(hr *http.Response, max, drain int64, keep bool) (body []byte, truncated, stillKeep bool) {
	var err error
	if n := hr.ContentLength; n >= 0 && n <= max {
		body = make([]byte, n)
		var got int
		got, err = io.ReadFull(hr.Body, body)
		body = body[:got]
		if err == nil {
			// The body reader reports its end, and what follows it (a
			// chunked trailer) is consumed, only on a read past it.
			_, err = hr.Body.Read(nil)
			if err == io.EOF {
				err = nil
			}
		}
		return body, false, keep && err == nil
	}
	body, err = io.ReadAll(io.LimitReader(hr.Body, max+1))
	if int64(len(body)) > max {
		body, truncated = body[:max], true
	}
	if err != nil {
		return body, truncated, false
	}
	if !truncated {
		return body, false, keep
	}
	n, err := io.Copy(io.Discard, io.LimitReader(hr.Body, drain+1))
	return body, true, keep && err == nil && n <= drain
}

// hopHeaders are the client's own: it frames the request itself.
var hopHeaders = map[string]bool{
	"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Trailer": true,
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true, "Upgrade": true,
}

// write sends r in one write when it fits, and says how many bytes went
// out.
func (cn *conn) write(r *Request) (int64, error) {
	b := cn.wbuf[:0]
	b = append(b, "POST "...)
	b = append(b, r.Target...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, r.Host...)
	b = append(b, "\r\n"...)
	for k, vs := range r.Header {
		if hopHeaders[k] {
			continue
		}
		for _, v := range vs {
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, trimSpace(v)...)
			b = append(b, "\r\n"...)
		}
	}
	b = append(b, "Content-Length: "...)
	b = strconv.AppendInt(b, int64(len(r.Body)), 10)
	b = append(b, "\r\n\r\n"...)
	var n int64
	var err error
	if len(r.Body) <= maxCoalescedBody {
		b = append(b, r.Body...)
		var w int
		w, err = cn.nc.Write(b)
		n = int64(w)
	} else {
		bufs := net.Buffers{b, r.Body}
		n, err = bufs.WriteTo(cn.nc)
	}
	if cap(b) <= maxKeptWriteBuffer {
		cn.wbuf = b[:0]
	} else {
		cn.wbuf = nil
	}
	return n, err
}

// checkHeaders refuses what would break the request's framing, by the
// rules net/http's own writer applies (httpguts).
func checkHeaders(h http.Header) error {
	for k, vs := range h {
		if !httpguts.ValidHeaderFieldName(k) {
			return fmt.Errorf("%w: name %q is not a token", ErrInvalidHeader, k)
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return fmt.Errorf("%w: %s has a value with control characters", ErrInvalidHeader, k)
			}
		}
	}
	return nil
}

// trimSpace trims the spaces and tabs net/http trims from header values.
func trimSpace(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// IsTimeout reports an error of Post that its deadline caused.
func IsTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// cutContentType bounds a Content-Type read by net/http's reader.
func cutContentType(v string) string {
	if len(v) > maxContentType {
		return v[:maxContentType]
	}
	return v
}
