package delivery

import (
	"sync/atomic"
	"time"

	"github.com/keyhook/keyhook/recordexpr"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/webhooks"
)

// Endpoint is one version of a subscription resolved for delivery: its
// retry policy, credentials, timeout and signer, built once and shared by
// every delivery of that version. It is safe for concurrent use. A new
// subscription version needs a new Endpoint.
type Endpoint struct {
	sub     *subscription.Subscription
	policy  webhooks.RetryPolicy
	auth    *webhooks.Auth
	timeout time.Duration
	format  webhooks.Format
	now     func() time.Time
	// expr is the subscription's decoding, filter and transform, nil
	// when records go as they are; exprErr, when it did not compile (a
	// subscription stored before a check it fails), fails each record.
	expr    *recordexpr.Program
	exprErr error
	// signing is the signer of the moment, read without a lock and
	// rebuilt when a rotated-out secret expires.
	signing atomic.Pointer[signerState]
}

// New resolves sub for delivery. defaults fills the retry policy fields
// the subscription leaves at zero (the node's configuration); opts are
// the node's for decoding (recordexpr.WithSchemas, its Schema Registry).
func New(sub *subscription.Subscription, defaults webhooks.RetryPolicy, opts ...recordexpr.Option) *Endpoint {
	f := webhooks.Format(sub.Format)
	if sub.Batch.Enabled() {
		// A batching endpoint reads envelopes; a record sent alone (a
		// refused batch delivered one by one) comes in the same shape.
		f = webhooks.FormatEnvelope
	}
	e := &Endpoint{
		sub:     sub,
		policy:  sub.Retry.Policy(defaults),
		auth:    sub.Endpoint.WebhookAuth(),
		timeout: time.Duration(sub.Endpoint.TimeoutMS) * time.Millisecond,
		format:  f,
		now:     time.Now,
	}
	if spec := sub.RecordSpec(); !spec.Empty() {
		e.expr, e.exprErr = recordexpr.Compile(spec, opts...)
	}
	return e
}

// Subscription returns the subscription version e was built from. It must
// not be modified.
func (e *Endpoint) Subscription() *subscription.Subscription { return e.sub }

// Policy returns the subscription's retry policy over the node's defaults,
// with every default applied.
func (e *Endpoint) Policy() webhooks.RetryPolicy { return e.policy }

// Render returns the request delivering m, signed (when the subscription
// signs; m.ID is then the webhook-id), with the endpoint's credentials,
// timeout and redirect allowance. A message that cannot be put in the
// subscription's format is an error wrapping [webhooks.ErrInvalidMessage]:
// final, retrying cannot fix it.
func (e *Endpoint) Render(m *webhooks.Message) (*webhooks.Request, error) {
	req, err := webhooks.NewRequest(e.sub.Endpoint.URL, e.format, m, e.sub.CloudEventsType)
	if err != nil {
		return nil, err
	}
	e.complete(req)
	return req, nil
}

// RenderBatch returns the request delivering ms in one batch (see
// [webhooks.Batch]), completed like [Endpoint.Render]: its webhook-id is
// the batch id and the signature covers the whole body.
func (e *Endpoint) RenderBatch(ms []*webhooks.Message) (*webhooks.Request, error) {
	req, err := webhooks.NewBatchRequest(e.sub.Endpoint.URL, ms)
	if err != nil {
		return nil, err
	}
	e.complete(req)
	return req, nil
}

// complete adds what every request of the subscription carries.
func (e *Endpoint) complete(req *webhooks.Request) {
	req.Signer = e.Signer()
	req.Auth = e.auth
	req.Timeout = e.timeout
	req.FollowRedirects = e.sub.Endpoint.FollowRedirects
}
