package webhooks

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

const instrumentation = "github.com/keyhook/keyhook/webhooks"

// startAttempt opens the client span of one attempt, a child of whatever
// span ctx carries (the caller's delivery span), with the HTTP client
// semantic conventions and the caller's own attributes. Attributes cost
// allocations on every attempt; only a span that records gets them, so
// tracing off stays nearly free.
func (c *Client) startAttempt(ctx context.Context, r *Request, attempt int) (context.Context, trace.Span) {
	ctx, span := c.tracer.Start(ctx, "POST", clientSpan...)
	if !span.IsRecording() {
		return ctx, span
	}
	attrs := make([]attribute.KeyValue, 0, 6+len(r.SpanAttributes))
	attrs = append(attrs, semconv.HTTPRequestMethodPost, semconv.URLFull(redactURL(r.URL)))
	if u, err := url.Parse(r.URL); err == nil {
		host, port := u.Hostname(), u.Port()
		if port == "" {
			port = map[string]string{"https": "443", "http": "80"}[u.Scheme]
		}
		attrs = append(attrs, semconv.ServerAddress(host))
		if p, err := strconv.Atoi(port); err == nil {
			attrs = append(attrs, semconv.ServerPort(p))
		}
	}
	if attempt > 1 {
		attrs = append(attrs, semconv.HTTPRequestResendCount(attempt-1))
	}
	attrs = append(attrs, r.SpanAttributes...)
	span.SetAttributes(attrs...)
	return ctx, span
}

var clientSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}

// endAttempt records the attempt's outcome on its span and ends it.
func endAttempt(span trace.Span, a *Attempt) {
	if !span.IsRecording() {
		span.End()
		return
	}
	if a.Status > 0 {
		span.SetAttributes(semconv.HTTPResponseStatusCode(a.Status))
	}
	switch {
	case a.Err != nil:
		var ne net.Error
		kind := "error"
		if errors.As(a.Err, &ne) && ne.Timeout() || errors.Is(a.Err, context.DeadlineExceeded) {
			kind = "timeout"
		}
		span.SetAttributes(semconv.ErrorTypeKey.String(kind))
		span.SetStatus(codes.Error, a.Err.Error())
	case a.Status >= 400:
		span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(a.Status)))
		span.SetStatus(codes.Error, http.StatusText(a.Status))
	}
	span.End()
}

// traced runs the attempt inside its client span.
func (c *Client) traced(next handler) handler {
	return func(ctx context.Context, cl *call) {
		ctx, span := c.startAttempt(ctx, cl.r, cl.a.Number)
		defer endAttempt(span, cl.a)
		next(ctx, cl)
	}
}

// propagated writes the attempt's trace context into the outgoing request,
// so the endpoint's spans are children of the attempt. It replaces any
// trace context the caller set.
func (c *Client) propagated(next handler) handler {
	return func(ctx context.Context, cl *call) {
		c.prop.Inject(ctx, ownedCarrier{cl})
		next(ctx, cl)
	}
}

// ownedCarrier is propagation.HeaderCarrier over a call's headers without
// two allocations per attempt: the propagators' names are lower case,
// which http.Header.Set would canonicalize into a new string each time,
// and the value goes into the call's owned values rather than a slice of
// its own.
type ownedCarrier struct{ cl *call }

func (o ownedCarrier) Get(key string) string { return o.cl.header.Get(key) }

func (o ownedCarrier) Keys() []string { return propagation.HeaderCarrier(o.cl.header).Keys() }

func (o ownedCarrier) Set(key, value string) {
	o.cl.owned.set(canonicalPropagated(key), value)
}

// canonicalPropagated is http.CanonicalHeaderKey(key), without allocating
// for the names of the W3C propagators.
func canonicalPropagated(key string) string {
	switch key {
	case "traceparent":
		return "Traceparent"
	case "tracestate":
		return "Tracestate"
	case "baggage":
		return "Baggage"
	}
	return http.CanonicalHeaderKey(key)
}
