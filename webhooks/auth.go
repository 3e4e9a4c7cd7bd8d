package webhooks

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
)

// ErrInvalidRequest is wrapped by the error of an attempt that [Client.Send]
// refused to make because the request itself is wrong (invalid
// credentials, a signer without a delivery id). Such an attempt is final:
// retrying cannot fix it.
var ErrInvalidRequest = errors.New("webhooks: invalid request")

// Auth holds the credentials an endpoint expects on every request. The
// zero value sends none. Auth never prints its values: every fmt verb and
// slog show only which credentials are set.
type Auth struct {
	// Headers are sent as is, one value each: API keys and the like. Names
	// are HTTP tokens; the headers keyhook sets itself are refused (see
	// Validate).
	Headers map[string]string
	// BearerToken is sent as "Authorization: Bearer <token>".
	BearerToken string
	// BasicUser and BasicPassword are sent as HTTP Basic authentication
	// (RFC 7617) when BasicUser is set.
	BasicUser, BasicPassword string
	// AWSSigV4, if not nil, signs every attempt for AWS IAM.
	AWSSigV4 *AWSSigV4
	// GoogleIDToken, if not nil, sends a Google-signed ID token.
	GoogleIDToken *GoogleIDToken
	// OAuth2, if not nil, sends a token of the client credentials grant.
	OAuth2 *OAuth2ClientCredentials
	// ClientCert, if not nil, is presented in the TLS handshake. It
	// composes with every other credential.
	ClientCert *ClientCert
}

// reservedHeaders are set by the client, the encoder, the signer or the
// transport; a credential header must not replace them. Compared in
// canonical form.
var reservedHeaders = map[string]bool{
	"Content-Type":      true,
	"Content-Length":    true,
	"Content-Encoding":  true,
	"Transfer-Encoding": true,
	"Connection":        true,
	"Keep-Alive":        true,
	"Upgrade":           true,
	"Te":                true,
	"Trailer":           true,
	"Host":              true,
	"User-Agent":        true,
	"Traceparent":       true,
	"Tracestate":        true,
	"Baggage":           true,
}

// reservedHeaderPrefixes are the header families keyhook owns: its own
// metadata, the Standard Webhooks signature and the CloudEvents binary
// mode attributes.
var reservedHeaderPrefixes = []string{"Keyhook-", "Webhook-", "Ce-", "Proxy-"}

// Validate reports the first problem of a, naming the field as in a
// subscription's JSON (auth.headers, auth.bearer_token, auth.basic_user,
// auth.basic_password). It refuses header names that are not tokens, names
// of headers keyhook sets itself (Content-Type, Host, User-Agent,
// traceparent, keyhook-*, webhook-*, ce-*...), control characters in any
// value (a CR or LF would let a value inject headers), a colon in the basic
// user (RFC 7617), a password without a user, two names differing only
// in case, and two sources of Authorization at once (the static ones,
// aws_sigv4, google_id_token and oauth2_client_credentials each set it).
// Its messages never contain a value.
func (a Auth) Validate() error {
	if err := a.validateStatic(); err != nil {
		return err
	}
	if n := a.authorizationSources(); n > 1 {
		return errors.New("auth: bearer_token, basic_user, an Authorization header, aws_sigv4, google_id_token and oauth2_client_credentials each set Authorization: set one")
	}
	if a.AWSSigV4 != nil {
		for name := range a.Headers {
			if strings.HasPrefix(http.CanonicalHeaderKey(name), "X-Amz-") {
				return fmt.Errorf("auth.headers: %q is set by the aws_sigv4 signature", name)
			}
		}
	}
	for _, k := range []interface{ validate() error }{a.AWSSigV4, a.GoogleIDToken, a.OAuth2, a.ClientCert} {
		if err := k.validate(); err != nil {
			return err
		}
	}
	return nil
}

// authorizationSources counts the credentials that set Authorization.
func (a Auth) authorizationSources() int {
	n := 0
	for name := range a.Headers {
		if http.CanonicalHeaderKey(name) == "Authorization" {
			n++
		}
	}
	for _, set := range []bool{a.BearerToken != "", a.BasicUser != "", a.AWSSigV4 != nil, a.GoogleIDToken != nil, a.OAuth2 != nil} {
		if set {
			n++
		}
	}
	return n
}

// validateStatic checks the static credentials: headers, bearer, basic.
func (a Auth) validateStatic() error {
	bearer, basic := a.BearerToken != "", a.BasicUser != ""
	seen := make(map[string]string, len(a.Headers))
	for _, name := range slices.Sorted(maps.Keys(a.Headers)) {
		canon := http.CanonicalHeaderKey(name)
		prev, dup := seen[canon]
		seen[canon] = name
		switch {
		case dup:
			return fmt.Errorf("auth.headers: %q and %q name the same header", prev, name)
		case !isToken(name):
			return fmt.Errorf("auth.headers: %q is not a valid header name", name)
		case reservedHeaders[canon] || hasAnyPrefix(canon, reservedHeaderPrefixes):
			return fmt.Errorf("auth.headers: %q is set by keyhook and cannot be configured", name)
		case canon == "Authorization" && (bearer || basic):
			return fmt.Errorf("auth.headers: %q conflicts with auth.bearer_token or auth.basic_user, which set it too", name)
		case hasControl(a.Headers[name]):
			return fmt.Errorf("auth.headers[%q] must not contain control characters such as CR or LF", name)
		}
	}
	switch {
	case bearer && basic:
		return errors.New("auth.bearer_token and auth.basic_user cannot both be set: each sets Authorization")
	case hasControl(a.BearerToken) || strings.ContainsAny(a.BearerToken, " \t"):
		return errors.New("auth.bearer_token must not contain spaces or control characters such as CR or LF")
	case a.BasicPassword != "" && !basic:
		return errors.New("auth.basic_password is set without auth.basic_user")
	case strings.Contains(a.BasicUser, ":"):
		return errors.New("auth.basic_user must not contain a colon")
	case hasControl(a.BasicUser):
		return errors.New("auth.basic_user must not contain control characters such as CR or LF")
	case hasControl(a.BasicPassword):
		return errors.New("auth.basic_password must not contain control characters such as CR or LF")
	}
	return nil
}

// Apply sets a's credentials on h. It does not validate: call Validate
// first ([Client.Send] does).
func (a Auth) Apply(h http.Header) {
	for name, v := range a.Headers {
		h.Set(name, v)
	}
	switch {
	case a.BearerToken != "":
		h.Set("Authorization", "Bearer "+a.BearerToken)
	case a.BasicUser != "":
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(a.BasicUser+":"+a.BasicPassword)))
	}
}

// headerNames returns the canonical names of the headers Apply sets, so a
// redirect to another origin can drop them.
func (a Auth) headerNames() []string {
	names := make([]string, 0, len(a.Headers)+1)
	for name := range a.Headers {
		names = append(names, http.CanonicalHeaderKey(name))
	}
	if a.BearerToken != "" || a.BasicUser != "" || a.GoogleIDToken != nil || a.OAuth2 != nil || a.AWSSigV4 != nil {
		names = append(names, "Authorization")
	}
	if a.AWSSigV4 != nil {
		names = append(names, awsSignedHeaders...) // Authorization again: harmless
	}
	return names
}

// String shows which credentials are set, never their values (an AWS
// region and service are not secret), such as
// "Auth{headers: [X-Api-Key], bearer_token: [REDACTED]}".
func (a Auth) String() string {
	var parts []string
	if len(a.Headers) > 0 {
		parts = append(parts, fmt.Sprintf("headers: %v", slices.Sorted(maps.Keys(a.Headers))))
	}
	if a.BearerToken != "" {
		parts = append(parts, "bearer_token: "+redacted)
	}
	if a.BasicUser != "" || a.BasicPassword != "" {
		parts = append(parts, "basic: "+redacted)
	}
	if a.AWSSigV4 != nil {
		parts = append(parts, "aws_sigv4: "+a.AWSSigV4.Region+"/"+a.AWSSigV4.service())
	}
	if a.GoogleIDToken != nil {
		parts = append(parts, "google_id_token: "+redacted)
	}
	if a.OAuth2 != nil {
		parts = append(parts, "oauth2_client_credentials: "+redacted)
	}
	if a.ClientCert != nil {
		parts = append(parts, "client_certificate: "+redacted)
	}
	return "Auth{" + strings.Join(parts, ", ") + "}"
}

// GoString returns the same as String, so %#v does not print values.
func (a Auth) GoString() string { return a.String() }

// Format prints the String form for every verb: without it, %d or %x would
// walk the fields and print the values.
func (a Auth) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, a.String()) }

// LogValue keeps the values out of slog output, whatever the handler.
func (a Auth) LogValue() slog.Value { return slog.StringValue(a.String()) }

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// authenticated adds the request's credentials to its attempt, and names
// them so that a redirect to another origin drops them: the static ones
// and the tokens now, the AWS signature last, in transport, over the
// headers and body actually sent. An Auth that fails Validate ends the
// attempt, final; a token that cannot be had ends it, to be retried (final
// only when the address policy refuses the token endpoint, as it would
// the endpoint).
func (c *Client) authenticated(next handler) handler {
	return func(ctx context.Context, cl *call) {
		auth := cl.r.Auth
		if auth == nil {
			next(ctx, cl)
			return
		}
		if err := auth.Validate(); err != nil {
			cl.a.Err = fmt.Errorf("%w: %w", ErrInvalidRequest, err)
			return
		}
		auth.Apply(cl.header)
		cl.credentials = auth.headerNames()
		token, err := c.creds.bearer(auth)
		if err != nil {
			cl.a.Err = err
			return
		}
		if token != "" {
			cl.header.Set("Authorization", "Bearer "+token)
		}
		if s := auth.AWSSigV4; s != nil {
			creds, err := c.creds.awsCredentials(ctx, s)
			if err != nil {
				cl.a.Err = err
				return
			}
			body := cl.r.Body
			cl.finish = func(req *http.Request) error { return s.sign(req.Context(), creds, req, body, c.clock.Now()) }
		}
		if cert := auth.ClientCert; cert != nil {
			hc, err := c.creds.client(cert, c.checkRedirect)
			if err != nil {
				cl.a.Err = err
				return
			}
			cl.http = hc
		}
		next(ctx, cl)
	}
}
