package webhooks

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"golang.org/x/oauth2"
)

// maxCachedCredentials bounds the credentials a client keeps. Past it the
// cache starts over: each subscription then pays one token request (or
// one new connection) again, which is cheaper than tracking use.
const maxCachedCredentials = 1024

// tokenRequestTimeout bounds one request to a token endpoint.
const tokenRequestTimeout = 30 * time.Second

// credentialCache keeps what authenticating an attempt costs to make:
// token sources, AWS credentials, connection pools presenting a client
// certificate. Entries are keyed by the credentials' configuration, so
// every delivery of a subscription version (and of any version with the
// same credentials) shares one token, and changed credentials start
// afresh. It is safe for concurrent use.
type credentialCache struct {
	base *http.Transport
	// egress is a context carrying the HTTP client of token requests
	// (oauth2.HTTPClient): the client's own transport, so token
	// endpoints face the same address policy as endpoints.
	egress context.Context

	mu      sync.Mutex
	entries map[[sha256.Size]byte]*credentialEntry
}

// credentialEntry is built once, on first use, under its own lock so that
// building one (a token request) holds back only the deliveries that need it.
type credentialEntry struct {
	mu     sync.Mutex
	tokens oauth2.TokenSource
	aws    aws.CredentialsProvider
	tr     *http.Transport
	client *http.Client
}

func newCredentialCache(base *http.Transport) *credentialCache {
	egress := &http.Client{
		Transport: base,
		Timeout:   tokenRequestTimeout,
		// A token endpoint that redirects is answered as is: following
		// would send the client secret wherever it points.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return &credentialCache{
		base:    base,
		egress:  context.WithValue(context.Background(), oauth2.HTTPClient, egress),
		entries: make(map[[sha256.Size]byte]*credentialEntry),
	}
}

// entry returns the entry of key, locked; the caller unlocks it.
func (cc *credentialCache) entry(key string) *credentialEntry {
	k := sha256.Sum256([]byte(key))
	cc.mu.Lock()
	e := cc.entries[k]
	if e == nil {
		if len(cc.entries) >= maxCachedCredentials {
			cc.clearLocked()
		}
		e = &credentialEntry{}
		cc.entries[k] = e
	}
	cc.mu.Unlock()
	e.mu.Lock()
	return e
}

func (cc *credentialCache) clearLocked() {
	for k, e := range cc.entries {
		if e.tr != nil {
			e.tr.CloseIdleConnections()
		}
		delete(cc.entries, k)
	}
}

// closeIdleConnections closes the idle connections of every pool that
// presents a client certificate.
func (cc *credentialCache) closeIdleConnections() {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for _, e := range cc.entries {
		if e.tr != nil {
			e.tr.CloseIdleConnections()
		}
	}
}

// bearer returns the token of a, which uses OAuth2 or a Google ID token.
func (cc *credentialCache) bearer(a *Auth) (string, error) {
	var key, what string
	var build func() (oauth2.TokenSource, error)
	switch {
	case a.OAuth2 != nil:
		key, what = a.OAuth2.cacheKey(), "oauth2 token"
		build = func() (oauth2.TokenSource, error) { return a.OAuth2.tokenSource(cc.egress), nil }
	case a.GoogleIDToken != nil:
		key, what = a.GoogleIDToken.cacheKey(), "google id token"
		build = func() (oauth2.TokenSource, error) { return a.GoogleIDToken.tokenSource(cc.egress) }
	default:
		return "", nil
	}
	e := cc.entry(key)
	if e.tokens == nil {
		ts, err := build()
		if err != nil {
			e.mu.Unlock()
			return "", tokenError(what, err)
		}
		e.tokens = ts
	}
	ts := e.tokens
	e.mu.Unlock()
	// The source is safe for concurrent use and asks the server once
	// when the token nears its expiry, however many deliveries wait.
	tok, err := ts.Token()
	if err != nil {
		return "", tokenError(what, err)
	}
	if tok.AccessToken == "" || hasControl(tok.AccessToken) {
		return "", fmt.Errorf("webhooks: %s: the token endpoint answered an unusable token", what)
	}
	return tok.AccessToken, nil
}

// awsCredentials returns the credentials s signs with.
func (cc *credentialCache) awsCredentials(ctx context.Context, s *AWSSigV4) (aws.CredentialsProvider, error) {
	e := cc.entry(s.cacheKey())
	defer e.mu.Unlock()
	if e.aws == nil {
		p, err := awsCredentials(ctx, s)
		if err != nil {
			return nil, err
		}
		e.aws = p
	}
	return e.aws, nil
}

// client returns the HTTP client presenting cert, its redirects checked
// by check.
func (cc *credentialCache) client(cert *ClientCert, check func(*http.Request, []*http.Request) error) (*http.Client, error) {
	e := cc.entry(cert.cacheKey())
	defer e.mu.Unlock()
	if e.client == nil {
		tr, err := cert.transportFor(cc.base)
		if err != nil {
			return nil, fmt.Errorf("%w: client certificate: %v", ErrInvalidRequest, err)
		}
		e.tr, e.client = tr, &http.Client{Transport: tr, CheckRedirect: check}
	}
	return e.client, nil
}

// tokenError describes a failed token request without what the server
// answered beyond its status and error code, and without the token
// URL's path or query: the answer of a hostile or broken server may
// echo the credentials it was sent.
func tokenError(what string, err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		msg := "webhooks: " + what + ": the token endpoint refused"
		if re.Response != nil {
			msg += fmt.Sprintf(" with status %d", re.Response.StatusCode)
		}
		if re.ErrorCode != "" && len(re.ErrorCode) <= 64 && !hasControl(re.ErrorCode) {
			msg += fmt.Sprintf(" (%s)", re.ErrorCode)
		}
		return errors.New(msg)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("webhooks: %s: %w", what, &url.Error{Op: ue.Op, URL: redactURL(ue.URL), Err: ue.Err})
	}
	return fmt.Errorf("webhooks: %s: %w", what, err)
}
