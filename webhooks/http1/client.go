package http1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
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
)

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
}

// Client posts requests over pooled connections. It is safe for
// concurrent use.
type Client struct {
	cfg   Config
	pools sync.Map // addr → *pool
}

// New returns a Client for cfg.
func New(cfg Config) (*Client, error) {
	switch {
	case cfg.Dial == nil:
		return nil, errors.New("http1: Dial is required")
	case cfg.MaxIdlePerAddr < 0, cfg.IdleTimeout < 0, cfg.DrainBytes < 0, cfg.DialTimeout < 0:
		return nil, errors.New("http1: limits must not be negative")
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
// cancels it. A connection the endpoint closed while it waited in the
// pool (the write or the read fails before any byte of an answer came
// back) is replaced once by a new one.
func (c *Client) Post(ctx context.Context, deadline time.Time, r *Request) (Response, error) {
	if err := checkHeaders(r.Header); err != nil {
		return Response{}, err
	}
	if err := ctx.Err(); err != nil {
		return Response{}, err // sent, it would only be cut short
	}
	p := c.pool(r.Addr)
	for try := 0; ; try++ {
		var cn *conn
		reused := try == 0 // a retry takes a new connection
		if reused {
			cn = p.get(c.cfg.IdleTimeout)
		}
		if cn == nil {
			var err error
			if cn, err = c.dial(ctx, deadline, r.Addr); err != nil {
				return Response{}, err
			}
			reused = false
		}
		resp, keep, err := cn.roundTrip(ctx, deadline, r, c.cfg.DrainBytes)
		if err == nil {
			if keep {
				p.put(cn, c.cfg.MaxIdlePerAddr, c.cfg.IdleTimeout)
			} else {
				cn.close()
			}
			return resp, nil
		}
		cn.close()
		if reused && cn.answered == 0 && ctx.Err() == nil && !IsTimeout(err) {
			// Closed by the endpoint while idle, nothing answered: those
			// idle for as long are likely closed too (an endpoint's idle
			// timeout, or its restart).
			p.closeIdleSince(cn.idleAt)
			continue
		}
		return Response{}, err
	}
}

// CloseIdle closes every idle connection.
func (c *Client) CloseIdle() {
	c.pools.Range(func(_, v any) bool {
		v.(*pool).closeAll()
		return true
	})
}

func (c *Client) pool(addr string) *pool {
	if v, ok := c.pools.Load(addr); ok {
		return v.(*pool)
	}
	v, _ := c.pools.LoadOrStore(addr, &pool{})
	return v.(*pool)
}

func (c *Client) dial(ctx context.Context, deadline time.Time, addr string) (*conn, error) {
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
	cn := &conn{nc: nc}
	cn.br = bufio.NewReaderSize(cn, readBufferSize)
	cn.cut = cn.cutIfEnded
	return cn, nil
}

// conn is one connection and its read buffer. answered counts the bytes
// read back for the request in progress.
type conn struct {
	nc       net.Conn
	br       *bufio.Reader
	wbuf     []byte
	answered int
	idleAt   time.Time
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

// Read reads from the connection, counting what the endpoint sent.
func (cn *conn) Read(b []byte) (int, error) {
	n, err := cn.nc.Read(b)
	cn.answered += n
	return n, err
}

// close closes the connection and lets its context go: a context that
// outlives its requests (a partition's) must not keep closed
// connections.
func (cn *conn) close() {
	cn.stopWatch()
	_ = cn.nc.Close()
}

// aLongTimeAgo is a deadline that has passed: setting it interrupts a
// blocked read or write at once.
var aLongTimeAgo = time.Unix(1, 0)

// roundTrip writes r and reads its answer. keep reports whether the
// connection can carry another request.
func (cn *conn) roundTrip(ctx context.Context, deadline time.Time, r *Request, drain int64) (resp Response, keep bool, err error) {
	cn.answered = 0
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
	if err := cn.write(r); err != nil {
		return Response{}, false, err
	}
	if _, err := cn.br.Peek(1); err != nil {
		return Response{}, false, err
	}
	if h, ok := parseFastHead(cn.br); ok {
		_, _ = cn.br.Discard(h.size) // buffered: cannot fail
		resp = Response{Status: h.status, RetryAfter: h.retryAfter}
		keep = !h.close
		if h.length > 0 {
			resp.Body, resp.Truncated, keep = readFixed(cn.br, h.length, r.MaxBody, drain, keep)
		}
		return resp, keep, nil
	}
	hr, err := cn.readHead()
	if err != nil {
		return Response{}, false, err
	}
	resp = Response{Status: hr.StatusCode, RetryAfter: hr.Header.Get("Retry-After")}
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
	resp.Body, resp.Truncated, keep = readBody(hr, r.MaxBody, drain, keep)
	return resp, keep, nil
}

// readHead reads the answer's status line and headers, past any
// informational (1xx) answer.
func (cn *conn) readHead() (*http.Response, error) {
	for {
		hr, err := http.ReadResponse(cn.br, nil)
		if err != nil {
			return nil, err
		}
		if hr.StatusCode >= 100 && hr.StatusCode <= 199 && hr.StatusCode != http.StatusSwitchingProtocols {
			continue
		}
		return hr, nil
	}
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

// write sends r in one write when it fits.
func (cn *conn) write(r *Request) error {
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
	var err error
	if len(r.Body) <= maxCoalescedBody {
		b = append(b, r.Body...)
		_, err = cn.nc.Write(b)
	} else {
		bufs := net.Buffers{b, r.Body}
		_, err = bufs.WriteTo(cn.nc)
	}
	if cap(b) <= maxKeptWriteBuffer {
		cn.wbuf = b[:0]
	} else {
		cn.wbuf = nil
	}
	return err
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
