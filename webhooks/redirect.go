package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// ErrRedirectRefused is wrapped by the error of an attempt whose endpoint
// redirected somewhere the client will not follow: a redirect that would
// turn the POST into a GET without its body (301, 302, 303), a downgrade
// from https to http, or a target the [AddressPolicy] refuses. Such an
// attempt is final: the endpoint will redirect again.
var ErrRedirectRefused = errors.New("webhooks: redirect refused")

// redirectKey carries, in a request's context, its [redirectRules].
type redirectKey struct{}

// redirectRules are what checkRedirect needs to know of the request being
// redirected: how many hops it may take and which headers are credentials
// that must not follow it to another origin.
type redirectRules struct {
	limit       int
	credentials []string
	// clientCert says the request presents a client certificate, which
	// lives in the connection and cannot be dropped like a header.
	clientCert bool
}

// checkRedirect decides, before each redirect, whether the client follows
// it. Refusals wrap ErrRedirectRefused so that Classify makes them final;
// running out of hops returns the last 3xx as the attempt's status, final
// as well.
func (c *Client) checkRedirect(req *http.Request, via []*http.Request) error {
	rules, _ := req.Context().Value(redirectKey{}).(redirectRules)
	if len(via) > rules.limit {
		return http.ErrUseLastResponse
	}
	status := 0
	if req.Response != nil {
		status = req.Response.StatusCode
	}
	target := redactURL(req.URL.String())
	if req.Method != http.MethodPost {
		// net/http rewrites POST to GET for 301, 302 and 303 and drops the
		// body: following would acknowledge a delivery never made.
		return fmt.Errorf("%w: a %d redirect to %s would resend the webhook as %s without its body; only 307 and 308 are followed",
			ErrRedirectRefused, status, target, req.Method)
	}
	prev := via[len(via)-1]
	if prev.URL.Scheme == "https" && req.URL.Scheme != "https" {
		return fmt.Errorf("%w: redirect from https to %s would send the webhook unencrypted", ErrRedirectRefused, target)
	}
	if err := c.cfg.Policy.CheckURL(req.Context(), req.URL.String()); err != nil {
		if req.Context().Err() != nil {
			return err
		}
		return fmt.Errorf("%w: to %s: %w", ErrRedirectRefused, target, err)
	}
	if sameOrigin(via[0], req) {
		return nil
	}
	if rules.clientCert {
		// The handshake with the new origin would present the
		// subscription's certificate: refused rather than given away.
		return fmt.Errorf("%w: a redirect to %s, another origin, would present the subscription's client certificate there",
			ErrRedirectRefused, target)
	}
	// Credentials belong to the registered endpoint. net/http drops
	// Authorization on a change of domain only; a custom API-key header
	// or a change of port would still carry them.
	for _, name := range rules.credentials {
		req.Header.Del(name)
	}
	return nil
}

func sameOrigin(a, b *http.Request) bool {
	oa, errA := Origin(a.URL.String())
	ob, errB := Origin(b.URL.String())
	return errA == nil && errB == nil && oa == ob
}

// redirects is how many redirects an attempt of r follows: its own
// allowance, else the client's.
func (c *Client) redirects(r *Request) int {
	if r.FollowRedirects != 0 {
		return r.FollowRedirects
	}
	return c.cfg.FollowRedirects
}

// withRedirectRules records in ctx how r may be redirected, credentials
// naming its credential headers.
func (c *Client) withRedirectRules(ctx context.Context, r *Request, credentials []string) context.Context {
	rules := redirectRules{limit: c.redirects(r), credentials: credentials, clientCert: r.Auth != nil && r.Auth.ClientCert != nil}
	if rules.limit == 0 {
		return ctx // nothing is followed, so nothing needs dropping
	}
	return context.WithValue(ctx, redirectKey{}, rules)
}
