package webhooks

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/keyhook/keyhook/webhooks/http1"
)

// Defaults of ClientConfig, applied to fields left at their zero value.
const (
	DefaultTimeout             = 30 * time.Second
	DefaultMaxResponseBytes    = 64 << 10
	DefaultUserAgent           = "keyhook"
	DefaultMaxIdleConnsPerHost = 1 << 16
	// DefaultMaxResponseHeaderBytes bounds a response's head. A webhook
	// answer's head is a few hundred bytes, and proxies in front of
	// endpoints keep theirs within 4 to 8 KiB (nginx's proxy_buffer_size);
	// net/http's own default, 10 MiB, times the attempts in flight would
	// let one endpoint hold gigabytes of a node.
	DefaultMaxResponseHeaderBytes = 64 << 10
)

// Fixed transport timeouts. They bound the phases that a slow or hostile
// endpoint could otherwise stretch without limit.
const (
	dialTimeout         = 5 * time.Second
	tlsHandshakeTimeout = 10 * time.Second
	idleConnTimeout     = 90 * time.Second
	// drainBytes is how much of a response beyond MaxResponseBytes is read
	// and thrown away so that an HTTP/1.1 connection can be reused. A longer
	// body costs one new connection, which is cheaper than reading it.
	drainBytes = 1 << 20
	// bodyTimeout bounds the read of a response body once its head has
	// arrived: the status has decided the attempt, and a body that never
	// ends must not hold its key for the whole attempt timeout.
	bodyTimeout = 2 * time.Second
)

// Header names set by Send.
const (
	HeaderAttempt   = "keyhook-attempt"
	HeaderWebhookID = "webhook-id"
	// HeaderIdempotencyKey carries the delivery id too: net/http sends a
	// POST that has it again when a kept-alive connection turns out to
	// have been closed before any answer came back, rather than failing
	// the attempt.
	HeaderIdempotencyKey = "Idempotency-Key"
)

var (
	canonicalAttempt        = http.CanonicalHeaderKey(HeaderAttempt)
	canonicalWebhookID      = http.CanonicalHeaderKey(HeaderWebhookID)
	canonicalIdempotencyKey = http.CanonicalHeaderKey(HeaderIdempotencyKey)
)

// ownedHeaders are set by Send alone, whatever the caller passes. The
// signature headers are among them because a signature computed ahead of
// the attempt would carry a stale timestamp.
var ownedHeaders = map[string]bool{
	"Content-Type":                                  true,
	"User-Agent":                                    true,
	http.CanonicalHeaderKey(HeaderAttempt):          true,
	http.CanonicalHeaderKey(HeaderWebhookID):        true,
	http.CanonicalHeaderKey(HeaderIdempotencyKey):   true,
	http.CanonicalHeaderKey(HeaderWebhookTimestamp): true,
	http.CanonicalHeaderKey(HeaderWebhookSignature): true,
}

// Clock is the source of time for attempt timestamps and for the waits
// between attempts. Tests inject one so that backoff takes no real time.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer starts a timer of d. The channel receives once d has elapsed;
	// the function stops the timer early and reports whether it did.
	NewTimer(d time.Duration) (<-chan time.Time, func() bool)
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// ClientConfig tunes a [Client]. The zero value is usable: every field left
// at zero takes the default named in its comment.
type ClientConfig struct {
	// Policy decides which addresses the client may connect to. It is
	// enforced at connect time, after DNS resolution.
	Policy AddressPolicy
	// Timeout bounds one attempt: connecting, sending, waiting for the
	// response headers and reading the response body. Default 30s.
	Timeout time.Duration
	// MaxResponseBytes is how much of a response body is kept in
	// Attempt.Body. Up to 1 MiB more is read and discarded so the connection
	// can be reused; the body is always closed. Default 64 KiB.
	MaxResponseBytes int64
	// UserAgent is sent as User-Agent. Default "keyhook".
	UserAgent string
	// MaxIdleConnsPerHost is how many idle connections are kept per
	// endpoint host. Every connection a busy endpoint needs is kept alive
	// between requests, so the default (65,536) is no cap in practice:
	// concurrency is bounded by the subscriptions' max_in_flight and the
	// endpoint limits, and connections left idle close after 90 s. A cap
	// below the concurrency in use closes and dials again all the time.
	MaxIdleConnsPerHost int
	// Clock times attempts and backoff waits. Nil means the system clock.
	Clock Clock
	// TracerProvider receives a client span per attempt. Nil: no spans.
	TracerProvider trace.TracerProvider
	// Propagator writes the attempt's trace context into each request.
	// Nil means W3C trace context.
	Propagator propagation.TextMapPropagator
	// FollowRedirects is how many redirects one attempt follows. Default
	// 0: none, a 3xx is the attempt's answer (and final). Only 307 and 308
	// are followed, since the others turn the POST into a GET without its
	// body; each target must pass Policy (checked before following and
	// again at connect time); https never downgrades to http; and
	// credentials from [Auth] are dropped when the origin changes. Any
	// other redirect ends the attempt with [ErrRedirectRefused].
	FollowRedirects int
	// NetHTTPOnly sends every attempt through net/http. By default
	// attempts to http endpoints go through the http1 client, which
	// costs about half the CPU, and attempts to https endpoints go over
	// HTTP/2 (net/http) where the endpoint chooses it in the handshake,
	// else through the http1 client over TLS; redirects, client
	// certificates and AWS signatures always use net/http.
	NetHTTPOnly bool
	// RootCAs, if not nil, are the authorities that endpoints'
	// certificates are verified against, on both transports. Default:
	// the system's roots.
	RootCAs *x509.CertPool
	// MaxResponseHeaderBytes bounds the bytes of a response before its
	// body (status line, headers, and any informational answer before the
	// final one), on both transports. An endpoint sending more fails the
	// attempt, which is retried. Default 64 KiB.
	MaxResponseHeaderBytes int64
	// Limiters, if not nil, bounds the concurrent attempts of
	// [Client.Deliver] per endpoint origin and adapts the bound to the
	// endpoint's throttling. Share one across every client of a node.
	// Default nil: no limit.
	Limiters *Limiters
}

// Client sends webhook requests. It is safe for concurrent use; create one
// and share it, so connections are pooled across deliveries.
type Client struct {
	cfg  ClientConfig
	http *http.Client
	tr   *http.Transport
	// h1 sends to plain http endpoints on the caller's goroutine (see
	// package http1); nil when ClientConfig.NetHTTPOnly.
	h1     *http1.Client
	clock  Clock
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	// attempt makes one attempt: the transport inside one wrapper per
	// concern (see NewClient).
	attempt handler
	// limited is Send inside the endpoint's limiter, when there is one:
	// what Deliver and DeliverBatch call.
	limited sendFunc
	// creds keeps token sources, AWS credentials and client certificate
	// pools across attempts.
	creds *credentialCache
	// goodURLs are endpoint URLs that passed the check of every attempt.
	goodURLs urlChecks
	// h2 is net/http speaking HTTP/2 alone, to https endpoints the http1
	// client could serve (see h2first.go); h1Only are the https addresses
	// that did not choose HTTP/2 in a handshake, which the http1 client
	// serves from then on.
	h2     *http.Transport
	h1Only addrSet
	// calls recycles the calls the http1 client sent, their header map
	// with them: a call and its map were five allocations of every
	// attempt. A call net/http sent is left to the collector, since
	// net/http may hold its header beyond the attempt (an HTTP/2 stream,
	// a redirect being followed).
	calls sync.Pool
}

// maxGoodURLs bounds a client's urlChecks: URLs come and go with
// subscriptions, and past the bound a URL is parsed at each attempt, as
// if it were new.
const maxGoodURLs = 4096

// urlChecks checks endpoint URLs, remembering those that passed: every
// attempt checks its URL, and a delivery's attempts, like a
// subscription's records, have the same one.
type urlChecks struct {
	good sync.Map // URL → *endpointURL
	n    atomic.Int64
}

// addrSet is a set of addresses, bounded like urlChecks: past the
// bound an address is not remembered (and an attempt to it costs a
// handshake more).
type addrSet struct {
	m sync.Map // addr → struct{}
	n atomic.Int64
}

func (s *addrSet) has(addr string) bool {
	_, ok := s.m.Load(addr)
	return ok
}

func (s *addrSet) add(addr string) {
	if s.n.Load() < maxGoodURLs {
		if _, loaded := s.m.LoadOrStore(addr, struct{}{}); !loaded {
			s.n.Add(1)
		}
	}
}

func (s *addrSet) remove(addr string) {
	if _, loaded := s.m.LoadAndDelete(addr); loaded {
		s.n.Add(-1)
	}
}

// endpointURL is what an attempt needs of its URL, parsed once.
type endpointURL struct {
	// h1 reports an http or https URL the http1 client can send to:
	// no credentials in it and a host in ASCII (net/http would turn a
	// Unicode one into punycode). tls reports https.
	h1, tls bool
	// addr is the "host:port" dialled, host the Host header and target
	// the request target.
	addr, host, target string
}

// check parses raw, or says why it is not a usable endpoint URL.
func (uc *urlChecks) check(raw string) (*endpointURL, error) {
	if v, ok := uc.good.Load(raw); ok {
		return v.(*endpointURL), nil
	}
	u, err := checkURL(raw)
	if err != nil {
		return nil, err
	}
	eu := &endpointURL{h1: u.User == nil && isASCII(u.Host), tls: u.Scheme == "https"}
	if eu.h1 {
		port := u.Port()
		switch {
		case port != "":
		case eu.tls:
			port = "443"
		default:
			port = "80"
		}
		eu.addr, eu.host, eu.target = net.JoinHostPort(u.Hostname(), port), u.Host, u.RequestURI()
	}
	if uc.n.Load() < maxGoodURLs {
		if _, loaded := uc.good.LoadOrStore(raw, eu); !loaded {
			uc.n.Add(1)
		}
	}
	return eu, nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// checkURL parses raw, or says why it is not an http or https URL with a
// host.
func checkURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the url.Error would repeat the query string
		}
		return nil, fmt.Errorf("%w: %v", ErrInvalidURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%w: scheme must be http or https, not %q", ErrInvalidURL, u.Scheme)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%w: missing host", ErrInvalidURL)
	}
	return u, nil
}

// NewClient returns a Client whose dialer checks every destination address
// against cfg.Policy at connect time, which follows redirects only as
// cfg.FollowRedirects allows (by default none: a 3xx is an outcome like any
// other status) and which speaks HTTP/1.1 and HTTP/2.
// Environment proxies are ignored on purpose: through a proxy the address
// check would vet the proxy, not the endpoint.
func NewClient(cfg ClientConfig) (*Client, error) {
	switch {
	case cfg.Timeout < 0:
		return nil, errors.New("webhooks: client timeout must not be negative")
	case cfg.MaxResponseBytes < 0:
		return nil, errors.New("webhooks: client max response bytes must not be negative")
	case cfg.MaxIdleConnsPerHost < 0:
		return nil, errors.New("webhooks: client max idle conns per host must not be negative")
	case cfg.FollowRedirects < 0:
		return nil, errors.New("webhooks: client follow redirects must not be negative")
	case cfg.MaxResponseHeaderBytes < 0:
		return nil, errors.New("webhooks: client max response header bytes must not be negative")
	}
	if cfg.MaxResponseHeaderBytes == 0 {
		cfg.MaxResponseHeaderBytes = DefaultMaxResponseHeaderBytes
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxResponseBytes == 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = DefaultUserAgent
	}
	if cfg.MaxIdleConnsPerHost == 0 {
		cfg.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
	}
	clock := cfg.Clock
	if clock == nil {
		clock = systemClock{}
	}

	policy := cfg.Policy
	dialer := &net.Dialer{
		Timeout:   dialTimeout,
		KeepAlive: 30 * time.Second,
		Resolver:  policy.Resolver,
		// Control runs after resolution, once per candidate address, before
		// the connect: the address checked is the address used, whatever DNS
		// answered at registration.
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return &ErrForbiddenAddress{Reason: "an unparsable address " + strconv.Quote(address)}
			}
			if reason := policy.Forbidden(ap.Addr()); reason != "" {
				return &ErrForbiddenAddress{Addr: ap.Addr().WithZone(""), Reason: reason}
			}
			return nil
		},
	}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dialer.DialContext(ctx, network, addr)
		var fa *ErrForbiddenAddress
		if err != nil && errors.As(err, &fa) && fa.Host == "" {
			// Control sees only the resolved address; name the host
			// too so the error says which endpoint resolved where.
			if host, _, splitErr := net.SplitHostPort(addr); splitErr == nil {
				fa.Host = host
			}
		}
		return conn, err
	}
	tr := &http.Transport{
		Proxy:       nil,
		DialContext: dial,
		// A custom DialContext and TLS config turn automatic HTTP/2 off;
		// ask for it explicitly.
		ForceAttemptHTTP2:   true,
		TLSClientConfig:     &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: cfg.RootCAs},
		TLSHandshakeTimeout: tlsHandshakeTimeout,
		// No ResponseHeaderTimeout: each attempt's context carries its
		// timeout, which a request may set shorter or longer.
		MaxIdleConns:        0, // no global cap: the per-host cap and the idle timeout bound it
		MaxIdleConnsPerHost: cfg.MaxIdleConnsPerHost,
		IdleConnTimeout:     idleConnTimeout,
		// The same bound as the http1 client's.
		MaxResponseHeaderBytes: cfg.MaxResponseHeaderBytes,
		// Response bodies are a few bytes of diagnostics or batch
		// results: asking for gzip would cost a header on every request
		// and a decompressor on every gzipped answer.
		DisableCompression: true,
	}
	tp, prop := cfg.TracerProvider, cfg.Propagator
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	c := &Client{cfg: cfg, tr: tr, clock: clock, tracer: tp.Tracer(instrumentation), prop: prop, creds: newCredentialCache(tr)}
	if !cfg.NetHTTPOnly {
		h1, err := http1.New(http1.Config{Dial: dial, DialTimeout: dialTimeout, MaxIdlePerAddr: cfg.MaxIdleConnsPerHost,
			IdleTimeout: idleConnTimeout, DrainBytes: drainBytes, MaxHeadBytes: cfg.MaxResponseHeaderBytes,
			BodyTimeout: bodyTimeout, TLS: tr.TLSClientConfig, TLSHandshakeTimeout: tlsHandshakeTimeout})
		if err != nil {
			return nil, fmt.Errorf("webhooks: %w", err)
		}
		c.h1 = h1
		c.h2 = newHTTP2Transport(tr, dial)
	}
	c.http = &http.Client{Transport: tr, CheckRedirect: c.checkRedirect}
	// One wrapper per concern, outermost first. The span covers the whole
	// attempt, a refused request included; credentials and the signature
	// come after the caller's headers, which they must not follow, and the
	// trace context last, so the endpoint continues the attempt's span.
	wrappers := []func(handler) handler{c.traced, c.prepared, c.authenticated, signed, c.propagated}
	if _, noop := cfg.TracerProvider.(tracenoop.TracerProvider); cfg.TracerProvider == nil || noop {
		// No spans: a span that records nothing would only carry the
		// caller's trace context, which the attempt's context carries
		// already, at the cost of a context per attempt.
		wrappers = wrappers[1:]
	}
	c.attempt = chain(c.transport, wrappers...)
	c.limited = limit(cfg.Limiters, c.sendOnce)
	return c, nil
}

// call is one attempt on its way through the client's wrappers: the
// request as the caller described it, the headers being built for it, and
// the attempt's outcome, which any wrapper may settle by setting a.Err
// and not calling the next.
type call struct {
	r      *Request
	header http.Header
	a      *Attempt
	// credentials names the headers that must not follow a redirect to
	// another origin.
	credentials []string
	// finish, if set, completes the request just before it is sent: a
	// signature over every header and the body (AWS SigV4).
	finish func(*http.Request) error
	// http, if set, sends the request instead of the client's own: a
	// pool presenting the subscription's client certificate.
	http *http.Client
	// url is the request's URL, parsed.
	url *endpointURL
	// attempt is what a points to and h1 the request of the http1
	// client: allocated with the call rather than each on its own, since
	// every attempt makes a call. owned sets the headers the client owns
	// (Content-Type, User-Agent, the attempt, the signature, the trace
	// context), their values kept in ownedVals while they fit.
	attempt   Attempt
	owned     headerSet
	ownedVals [10]string
	h1        http1.Request
	// netHTTP is set once net/http was given the header: the call must
	// not be recycled.
	netHTTP bool
}

// handler handles one call.
type handler func(ctx context.Context, c *call)

// chain returns core inside wrappers, the first outermost.
func chain(core handler, wrappers ...func(handler) handler) handler {
	for i := len(wrappers) - 1; i >= 0; i-- {
		core = wrappers[i](core)
	}
	return core
}

// CloseIdleConnections closes the pooled connections that carry no request.
// Call it when the client is no longer needed.
func (c *Client) CloseIdleConnections() {
	c.tr.CloseIdleConnections()
	if c.h2 != nil {
		c.h2.CloseIdleConnections()
	}
	if c.h1 != nil {
		c.h1.CloseIdle()
	}
	c.creds.closeIdleConnections()
}

// Request is one webhook to send.
type Request struct {
	// URL is the endpoint, http or https.
	URL string
	// Body is sent as is, with method POST.
	Body []byte
	// ContentType is sent as Content-Type. Default application/octet-stream.
	ContentType string
	// Header holds extra headers chosen by the caller (topic, offset,
	// key...), copied as is, except Content-Type, User-Agent,
	// keyhook-attempt, webhook-id, Idempotency-Key, webhook-timestamp and
	// webhook-signature, which Send sets itself. A name that is not a
	// token or a value with a control character makes the attempt fail,
	// final.
	Header http.Header
	// DeliveryID is stable across the attempts of one delivery and sent as
	// webhook-id so endpoints can deduplicate. Empty sends no webhook-id.
	DeliveryID string
	// Signer, if not nil, signs every attempt when it is sent (see
	// [Signer.Sign]); DeliveryID is then required.
	Signer *Signer
	// Auth, if not nil, adds the endpoint's credentials to every attempt.
	// An Auth that fails Validate makes the attempt fail, final.
	Auth *Auth
	// Timeout bounds each attempt; zero means the client's Timeout.
	Timeout time.Duration
	// FollowRedirects is how many 307/308 redirects each attempt of this
	// request follows, under the rules of ClientConfig.FollowRedirects
	// (every hop checked against the policy, no https to http downgrade,
	// credentials dropped when the origin changes). Zero means the
	// client's FollowRedirects; negative makes the attempt fail, final.
	FollowRedirects int
	// SpanAttributes are added to each attempt's span (the caller's
	// context: what is being delivered).
	SpanAttributes []attribute.KeyValue
}

// Attempt is the result of one request.
type Attempt struct {
	// Number counts attempts of one delivery from 1.
	Number int
	// Status is the HTTP status of the response, 0 if none arrived; a
	// status outside 100-599 is no HTTP status, and reported in Err.
	Status int
	// Err says why no response arrived (connection refused, timeout,
	// forbidden address, cancellation...). It is nil whenever Status is set:
	// what happens while reading a response body does not change what the
	// endpoint answered. Errors never contain the URL's path or query.
	Err error
	// RetryAfter is the endpoint's Retry-After, 0 when absent or unusable.
	RetryAfter time.Duration
	// Started is when the attempt began.
	Started time.Time
	// Duration is how long the attempt took, body read included.
	Duration time.Duration
	// Body holds the first bytes of the response body, at most
	// ClientConfig.MaxResponseBytes, for diagnostics and for
	// [ParseBatchResponse].
	Body []byte
	// BodyTruncated reports that the response body was longer than Body.
	BodyTruncated bool
	// ContentType is the response's Content-Type (at most 128 bytes), ""
	// for none; with RetryAfter, the headers the delivery log keeps.
	ContentType string
}

// Send performs one attempt of r, numbered attempt. It sets the headers
// keyhook-attempt, webhook-id and Idempotency-Key (the delivery id),
// Content-Type and User-Agent, the signature of r.Signer and the
// credentials of r.Auth, bounds the attempt by ClientConfig.Timeout (and
// the read of the body to 2 s after its head), and always closes the
// response body before returning. Send never retries and never waits for a [Limiter]; see
// [Client.Deliver].
func (c *Client) Send(ctx context.Context, r *Request, attempt int) Attempt {
	cl, _ := c.calls.Get().(*call)
	if cl == nil {
		cl = &call{header: make(http.Header, len(r.Header)+6)}
	}
	cl.r = r
	cl.attempt = Attempt{Number: attempt, Started: c.clock.Now()}
	cl.a = &cl.attempt
	c.attempt(ctx, cl)
	cl.a.Duration = c.clock.Now().Sub(cl.a.Started)
	a := cl.attempt
	if !cl.netHTTP {
		// Nothing holds the call any more: the http1 client is done with
		// the header when Post returns, and a refused request never left.
		h := cl.header
		clear(h)
		*cl = call{header: h}
		c.calls.Put(cl)
	}
	return a
}

// timeout is the attempt timeout of r: its own, else the client's.
func (c *Client) timeout(r *Request) time.Duration {
	if r.Timeout > 0 {
		return r.Timeout
	}
	return c.cfg.Timeout
}

// prepared refuses a request that can never be sent and gives the call
// the caller's headers and those the client owns.
func (c *Client) prepared(next handler) handler {
	return func(ctx context.Context, cl *call) {
		eu, err := c.checkRequest(cl.r)
		if err != nil {
			cl.a.Err = err
			return
		}
		cl.url = eu
		r := cl.r
		for k, vs := range r.Header {
			if ownedHeaders[http.CanonicalHeaderKey(k)] {
				// Dropped rather than overwritten: a key in another case would
				// survive Set and reach the endpoint as a second value.
				continue
			}
			// Shared, not copied: the wrappers after this one set names,
			// never change a value in place, and an append to a full
			// slice copies it.
			cl.header[k] = vs[:len(vs):len(vs)]
		}
		ct := r.ContentType
		if ct == "" {
			ct = octetStream
		}
		cl.owned = headerSet{h: cl.header, vals: cl.ownedVals[:0]}
		cl.owned.set("Content-Type", ct)
		cl.owned.set("User-Agent", c.cfg.UserAgent)
		cl.owned.set(canonicalAttempt, strconv.Itoa(cl.a.Number))
		if r.DeliveryID != "" {
			cl.owned.set(canonicalWebhookID, r.DeliveryID)
			// The same one-value slice: the header map holds it twice.
			cl.header[canonicalIdempotencyKey] = cl.header[canonicalWebhookID]
		}
		next(ctx, cl)
	}
}

// checkRequest reports what makes r unsendable at every attempt: its URL,
// its redirect allowance, its headers.
func (c *Client) checkRequest(r *Request) (*endpointURL, error) {
	eu, err := c.goodURLs.check(r.URL)
	if err != nil {
		return nil, err
	}
	if r.FollowRedirects < 0 {
		return nil, fmt.Errorf("%w: follow redirects must not be negative", ErrInvalidRequest)
	}
	return eu, checkHeaders(r)
}

// transport sends the call's request, bounded by the attempt timeout,
// through the http1 client or net/http, and settles the attempt with
// what came back.
func (c *Client) transport(ctx context.Context, cl *call) {
	deadline := time.Now().Add(c.timeout(cl.r))
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	// A refusal in the handshake comes before a byte of the request, so
	// the other protocol may send it within the same attempt.
	var ans answer
	switch {
	case !c.viaHTTP1(cl):
		ans = c.postNetHTTP(ctx, deadline, cl, c.tr)
	case cl.url.tls && !c.h1Only.has(cl.url.addr):
		ans = c.postNetHTTP(ctx, deadline, cl, c.h2)
		if errors.Is(ans.err, errNoHTTP2) {
			c.h1Only.add(cl.url.addr)
			ans = c.postHTTP1(ctx, deadline, cl)
		}
	default:
		ans = c.postHTTP1(ctx, deadline, cl)
		if cl.url.tls && errors.Is(ans.err, http1.ErrNoHTTP1) {
			// It spoke HTTP/1.1 once and now refuses it.
			c.h1Only.remove(cl.url.addr)
			ans = c.postNetHTTP(ctx, deadline, cl, c.h2)
		}
	}
	c.settle(ctx, cl.a, cl.r, deadline, ans)
}

// answer is what a transport brought back, before settle makes it the
// attempt's outcome.
type answer struct {
	status      int
	retryAfter  string
	contentType string
	body        []byte
	truncated   bool
	// err says why no answer came back; it is the transport's own, which
	// settle classifies, unless refused.
	err error
	// refused reports a request that never left (a URL net/http cannot
	// use, a signature that failed): err is the attempt's error as is.
	refused bool
}

// postNetHTTP sends the call's request through net/http, by tr when
// there is nothing to follow.
func (c *Client) postNetHTTP(ctx context.Context, deadline time.Time, cl *call, tr http.RoundTripper) answer {
	r := cl.r
	actx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	req, err := http.NewRequestWithContext(c.withRedirectRules(actx, r, cl.credentials), http.MethodPost, r.URL, bytes.NewReader(r.Body))
	if err != nil {
		return answer{err: fmt.Errorf("%w: %v", ErrInvalidURL, err), refused: true}
	}
	req.Header = cl.header
	cl.netHTTP = true
	if cl.finish != nil {
		if err := cl.finish(req); err != nil {
			return answer{err: err, refused: true}
		}
	}
	var resp *http.Response
	if cl.http == nil && c.redirects(r) == 0 {
		// Nothing to follow: the transport alone, without the client's
		// redirect bookkeeping, which copies every header of every
		// request.
		resp, err = tr.RoundTrip(req)
	} else {
		hc := c.http
		if cl.http != nil {
			hc = cl.http
		}
		resp, err = hc.Do(req)
	}
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	ans := answer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), contentType: resp.Header.Get("Content-Type")}
	if len(ans.contentType) > 128 {
		ans.contentType = ans.contentType[:128]
	}
	if resp.ContentLength == 0 {
		return ans // nothing to keep or drain (a 204, most often)
	}
	// The head has decided the attempt: the body gets bodyTimeout more,
	// after which the request's context ends and the read with it.
	defer time.AfterFunc(bodyTimeout, cancel).Stop()
	// Read errors are ignored on purpose: the status already says what the
	// endpoint decided, and a batch response cut short is judged by
	// ParseBatchResponse. One byte more than kept tells a body that was cut.
	ans.body, _ = io.ReadAll(io.LimitReader(resp.Body, c.cfg.MaxResponseBytes+1))
	if int64(len(ans.body)) > c.cfg.MaxResponseBytes {
		ans.body, ans.truncated = ans.body[:c.cfg.MaxResponseBytes], true
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainBytes))
	return ans
}

// viaHTTP1 reports whether cl goes through the http1 client: an http or
// https URL without credentials, with nothing that needs net/http
// (redirects to follow, a client certificate's pool, a signature over
// the *http.Request). An https one goes to HTTP/2 first (h2first.go).
func (c *Client) viaHTTP1(cl *call) bool {
	return c.h1 != nil && cl.url != nil && cl.url.h1 && cl.http == nil && cl.finish == nil && c.redirects(cl.r) == 0
}

// postHTTP1 sends the call's request through the http1 client.
func (c *Client) postHTTP1(ctx context.Context, deadline time.Time, cl *call) answer {
	eu := cl.url
	cl.h1 = http1.Request{Addr: eu.addr, TLS: eu.tls, Host: eu.host, Target: eu.target, Header: cl.header, Body: cl.r.Body, MaxBody: c.cfg.MaxResponseBytes}
	resp, err := c.h1.Post(ctx, deadline, &cl.h1)
	if err != nil {
		return answer{err: err}
	}
	return answer{status: resp.Status, retryAfter: resp.RetryAfter, contentType: resp.ContentType, body: resp.Body, truncated: resp.Truncated}
}

// settle is the one place that turns what either transport brought back
// into the attempt: the status, kept only within 100-599; its
// Retry-After; the body excerpt; and for an error its class — a request
// refused before sending, the caller's cancellation, the attempt's
// timeout, a head over the limit, anything else — in a text that names
// neither the URL's path nor the resolver, and quotes what the endpoint
// sent only printable and bounded.
func (c *Client) settle(ctx context.Context, a *Attempt, r *Request, deadline time.Time, ans answer) {
	if ans.err == nil && (ans.status < 100 || ans.status > 599) {
		// Not an HTTP status: as malformed as a status line net/http
		// refuses, whatever the transport's reader let through.
		ans.err = fmt.Errorf("malformed HTTP status code %d, outside 100-599", ans.status)
	}
	switch {
	case ans.refused:
		a.Err = ans.err
		return
	case ans.err != nil:
		a.Err = c.describeError(ctx, r, deadline, ans.err)
		return
	}
	a.Status = ans.status
	if ans.retryAfter != "" {
		a.RetryAfter = ParseRetryAfter(ans.retryAfter, c.clock.Now())
	}
	a.Body, a.BodyTruncated, a.ContentType = ans.body, ans.truncated, ans.contentType
}

// describeError classifies a transport's error for settle.
func (c *Client) describeError(ctx context.Context, r *Request, deadline time.Time, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // built again below, without the URL's path
	}
	post := func(err error) error { return &url.Error{Op: "Post", URL: redactURL(r.URL), Err: err} }
	switch {
	case errors.Is(err, http1.ErrInvalidHeader):
		return fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	case ctx.Err() != nil:
		return post(ctx.Err())
	case http1.IsTimeout(err) || !time.Now().Before(deadline):
		// Past the deadline, whatever the reader made of an answer cut
		// short ("malformed HTTP status code" of half a line) is the
		// timeout's doing.
		return fmt.Errorf("webhooks: attempt timed out after %s: %w", c.timeout(r), post(context.DeadlineExceeded))
	case errors.Is(err, http1.ErrHeadTooLarge) || strings.Contains(err.Error(), "server response headers exceeded"):
		// net/http says so only in words.
		return post(fmt.Errorf("%w: more than %d bytes", errHeadTooLarge, c.cfg.MaxResponseHeaderBytes))
	}
	return post(cleanError(withoutResolver(err)))
}

// errHeadTooLarge is an answer whose head went past
// ClientConfig.MaxResponseHeaderBytes, on either transport.
var errHeadTooLarge = errors.New("webhooks: response head too large")

// checkHeaders refuses what the transport would refuse at every attempt:
// retrying a request that can never be sent would block its key forever.
// Values are never repeated in the error.
func checkHeaders(r *Request) error {
	for name, vs := range r.Header {
		if !isToken(name) {
			return fmt.Errorf("%w: header name %q is not a token", ErrInvalidRequest, name)
		}
		for _, v := range vs {
			if hasControl(v) {
				return fmt.Errorf("%w: header %s has a value with control characters", ErrInvalidRequest, name)
			}
		}
	}
	if hasControl(r.ContentType) || hasControl(r.DeliveryID) {
		return fmt.Errorf("%w: content type and delivery id must not contain control characters", ErrInvalidRequest)
	}
	return nil
}
