package subscription

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/keyhook/keyhook/webhooks"
)

// Limits of the delivery policy.
const (
	// MaxSigningSecrets is the most secrets a subscription signs with at
	// once: the current one and those still in their rotation overlap.
	MaxSigningSecrets = 5
	// MaxFollowRedirects is the most redirects an endpoint may ask for.
	MaxFollowRedirects = 5
	// MaxRetryIntervalMS bounds retry.max_interval_ms (one hour).
	MaxRetryIntervalMS = 3600000
	// MaxRetryElapsedMS bounds retry.max_elapsed_ms (30 days): longer
	// than any retention a record could wait in, and far from where
	// milliseconds overflow a time.Duration.
	MaxRetryElapsedMS = 30 * 24 * 3600 * 1000
	// DefaultRotationOverlap is how long a rotated-out secret still signs.
	DefaultRotationOverlap = 24 * time.Hour
)

// RetryPolicy is a subscription's retry policy; zero fields take the
// node's defaults (500 ms initial, 60 s max interval, multiplier 2,
// jitter 0.3, unlimited attempts and time).
type RetryPolicy struct {
	InitialIntervalMS int     `json:"initial_interval_ms,omitempty"`
	MaxIntervalMS     int     `json:"max_interval_ms,omitempty"`
	Multiplier        float64 `json:"multiplier,omitempty"`
	// Jitter is the randomization factor, 0 to 1.
	Jitter      float64 `json:"jitter,omitempty"`
	MaxAttempts int     `json:"max_attempts,omitempty"`
	// MaxElapsedMS ends retrying this long after the first attempt; the
	// record is then dead-lettered.
	MaxElapsedMS int64 `json:"max_elapsed_ms,omitempty"`
}

// Policy converts the subscription's policy to webhooks', over defaults.
func (p RetryPolicy) Policy(defaults webhooks.RetryPolicy) webhooks.RetryPolicy {
	out := defaults
	if p.InitialIntervalMS > 0 {
		out.InitialInterval = time.Duration(p.InitialIntervalMS) * time.Millisecond
	}
	if p.MaxIntervalMS > 0 {
		out.MaxInterval = time.Duration(p.MaxIntervalMS) * time.Millisecond
	}
	if p.Multiplier > 0 {
		out.Multiplier = p.Multiplier
	}
	if p.Jitter > 0 {
		out.RandomizationFactor = p.Jitter
	}
	if p.MaxAttempts > 0 {
		out.MaxAttempts = p.MaxAttempts
	}
	// Validate bounds every field; the checks here keep a policy that
	// skipped it from wrapping around into a tiny or negative Duration.
	if p.MaxElapsedMS > 0 && p.MaxElapsedMS <= MaxRetryElapsedMS {
		out.MaxElapsed = time.Duration(p.MaxElapsedMS) * time.Millisecond
	}
	return out.WithDefaults()
}

// Batch groups records into one request, for endpoints that pay per
// invocation. A batch closes at MaxRecords records, MaxBytes of values, or
// MaxWaitMS after its first record became ready, whichever comes first.
// Records of one key stay in offset order within a batch, and a key's
// record is acked only after every earlier record of that key.
type Batch struct {
	// MaxRecords above 1 turns batching on.
	MaxRecords int `json:"max_records,omitempty"`
	// MaxBytes bounds the values in one batch; 0 means 1 MiB.
	MaxBytes int `json:"max_bytes,omitempty"`
	// MaxWaitMS is how long a batch waits to fill; 0 sends what is ready.
	MaxWaitMS int `json:"max_wait_ms,omitempty"`
}

// Enabled reports whether deliveries go in batches.
func (b Batch) Enabled() bool { return b.MaxRecords > 1 }

// Limits of batching.
const (
	MaxBatchRecords   = 1000
	MaxBatchBytes     = 10 << 20
	DefaultBatchBytes = 1 << 20
	MaxBatchWaitMS    = 60000
)

// Signing holds the Standard Webhooks secrets a subscription signs with.
// A secret's value is shown once, when it is created; every later read of
// the subscription carries only its id, prefix and dates.
type Signing struct {
	// Disabled turns signing off (an endpoint that verifies nothing).
	Disabled bool            `json:"disabled,omitempty"`
	Secrets  []SigningSecret `json:"secrets,omitempty"`
}

// SigningSecret is one signing key.
type SigningSecret struct {
	ID string `json:"id"`
	// Secret is "whsec_" and base64; empty in every answer but the one
	// that created it.
	Secret string `json:"secret,omitempty"`
	// Hint is the secret's first characters, so an operator can tell
	// secrets apart without seeing them.
	Hint      string     `json:"hint"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// Active reports whether the secret still signs at t.
func (s SigningSecret) Active(t time.Time) bool { return s.ExpiresAt == nil || t.Before(*s.ExpiresAt) }

// EndpointAuth authenticates deliveries to the endpoint. Its secret values
// are never returned after they are set (see Redacted). At most one of
// the credentials that set Authorization may be set (bearer, basic, an
// Authorization header, AWSSigV4, GoogleIDToken, OAuth2); ClientCert
// composes with any of them.
type EndpointAuth struct {
	Headers       map[string]string `json:"headers,omitempty"`
	BearerToken   string            `json:"bearer_token,omitempty"`
	BasicUsername string            `json:"basic_username,omitempty"`
	BasicPassword string            `json:"basic_password,omitempty"`
	// AWSSigV4 signs deliveries for AWS IAM (Lambda function URLs, API
	// Gateway) with the node's AWS credentials.
	AWSSigV4 *AWSSigV4Auth `json:"aws_sigv4,omitempty"`
	// GoogleIDToken sends Google-signed ID tokens (Cloud Run, Cloud
	// Functions).
	GoogleIDToken *GoogleIDTokenAuth `json:"google_id_token,omitempty"`
	// OAuth2 sends tokens of the OAuth 2.0 client credentials grant.
	OAuth2 *OAuth2ClientCredentials `json:"oauth2_client_credentials,omitempty"`
	// ClientCertificate is presented in the TLS handshake (mutual TLS).
	ClientCertificate *ClientCertificate `json:"client_certificate,omitempty"`
}

// AWSSigV4Auth signs deliveries with AWS Signature Version 4. No secret is
// stored: the credentials are the node's (or a role it assumes).
type AWSSigV4Auth struct {
	// Region is the endpoint's region, such as "eu-west-1". Required.
	Region string `json:"region"`
	// Service is the signing name: "lambda" (default) or "execute-api".
	Service string `json:"service,omitempty"`
	// RoleARN is a role the node assumes to sign; empty signs with the
	// node's own credentials.
	RoleARN string `json:"role_arn,omitempty"`
}

// GoogleIDTokenAuth sends Google-signed OpenID Connect ID tokens.
type GoogleIDTokenAuth struct {
	// Audience is the tokens' aud claim; empty means the endpoint URL
	// (without query).
	Audience string `json:"audience,omitempty"`
	// CredentialsJSON is a service account key, a secret; empty uses the
	// node's own credentials (the metadata server, or the service account
	// key GOOGLE_APPLICATION_CREDENTIALS names).
	CredentialsJSON string `json:"credentials_json,omitempty"`
}

// OAuth2ClientCredentials gets tokens with the client credentials grant.
type OAuth2ClientCredentials struct {
	TokenURL string `json:"token_url"`
	ClientID string `json:"client_id"`
	// ClientSecret is a secret.
	ClientSecret string   `json:"client_secret,omitempty"`
	Scopes       []string `json:"scopes,omitempty"`
}

// ClientCertificate is a TLS client certificate, PEM encoded. A new
// certificate takes effect with the subscription version that sets it.
type ClientCertificate struct {
	CertPEM string `json:"cert_pem"`
	// KeyPEM is the private key, a secret.
	KeyPEM string `json:"key_pem,omitempty"`
}

// Auth converts to webhooks' form. A Google ID token without an audience
// is left without one here; [Endpoint.WebhookAuth] gives it the default.
func (a *EndpointAuth) Auth() *webhooks.Auth {
	if a == nil {
		return nil
	}
	w := &webhooks.Auth{Headers: a.Headers, BearerToken: a.BearerToken, BasicUser: a.BasicUsername, BasicPassword: a.BasicPassword}
	if s := a.AWSSigV4; s != nil {
		w.AWSSigV4 = &webhooks.AWSSigV4{Region: s.Region, Service: s.Service, RoleARN: s.RoleARN}
	}
	if g := a.GoogleIDToken; g != nil {
		w.GoogleIDToken = &webhooks.GoogleIDToken{Audience: g.Audience, CredentialsJSON: g.CredentialsJSON}
	}
	if o := a.OAuth2; o != nil {
		w.OAuth2 = &webhooks.OAuth2ClientCredentials{TokenURL: o.TokenURL, ClientID: o.ClientID,
			ClientSecret: o.ClientSecret, Scopes: o.Scopes}
	}
	if c := a.ClientCertificate; c != nil {
		w.ClientCert = &webhooks.ClientCert{CertPEM: c.CertPEM, KeyPEM: c.KeyPEM}
	}
	return w
}

// WebhookAuth returns the endpoint's credentials in webhooks' form, a
// Google ID token's audience defaulting to the endpoint URL without its
// query and fragment. Nil when the endpoint has none.
func (e *Endpoint) WebhookAuth() *webhooks.Auth {
	w := e.Auth.Auth()
	if w != nil && w.GoogleIDToken != nil && w.GoogleIDToken.Audience == "" {
		w.GoogleIDToken.Audience = defaultAudience(e.URL)
	}
	return w
}

// TokenURL is a URL deliveries fetch tokens from, and the field that
// names it.
type TokenURL struct {
	Field, URL string
}

// TokenURLs returns the token endpoints the endpoint's credentials call:
// the OAuth2 token URL and a Google service account key's token_uri.
// They are egress like the endpoint itself.
func (e *Endpoint) TokenURLs() []TokenURL {
	a := e.Auth
	if a == nil {
		return nil
	}
	var out []TokenURL
	if a.OAuth2 != nil && a.OAuth2.TokenURL != "" {
		out = append(out, TokenURL{"endpoint.auth.oauth2_client_credentials.token_url", a.OAuth2.TokenURL})
	}
	if a.GoogleIDToken != nil && a.GoogleIDToken.CredentialsJSON != "" {
		var key struct {
			TokenURI string `json:"token_uri"`
		}
		if json.Unmarshal([]byte(a.GoogleIDToken.CredentialsJSON), &key) == nil && key.TokenURI != "" {
			out = append(out, TokenURL{"endpoint.auth.google_id_token.credentials_json", key.TokenURI})
		}
	}
	return out
}

func defaultAudience(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		return endpoint
	}
	u.RawQuery, u.Fragment, u.RawFragment = "", "", ""
	return u.String()
}

// NewSigningSecret makes a secret created at now.
func NewSigningSecret(now time.Time) (SigningSecret, error) {
	v, err := webhooks.GenerateSecret()
	if err != nil {
		return SigningSecret{}, fmt.Errorf("subscription: signing secret: %w", err)
	}
	return SigningSecret{ID: "sec_" + newID()[len(IDPrefix):], Secret: v, Hint: v[:len("whsec_")+4], CreatedAt: now.UTC()}, nil
}

// EnsureSigningSecret gives a subscription that signs, and has no secret,
// its first one.
func (s *Subscription) EnsureSigningSecret(now time.Time) error {
	if s.Signing.Disabled || len(s.Signing.Secrets) > 0 {
		return nil
	}
	sec, err := NewSigningSecret(now)
	if err != nil {
		return err
	}
	s.Signing.Secrets = []SigningSecret{sec}
	return nil
}

// RotateSigningSecret puts a new secret first; the previous ones keep
// signing for overlap (both signatures go out meanwhile), and secrets
// already expired are dropped.
func (s *Subscription) RotateSigningSecret(now time.Time, overlap time.Duration) (SigningSecret, error) {
	sec, err := NewSigningSecret(now)
	if err != nil {
		return SigningSecret{}, err
	}
	until := now.Add(overlap).UTC()
	kept := []SigningSecret{sec}
	for _, old := range s.Signing.Secrets {
		if !old.Active(now) {
			continue
		}
		if old.ExpiresAt == nil || old.ExpiresAt.After(until) {
			old.ExpiresAt = &until
		}
		kept = append(kept, old)
	}
	if len(kept) > MaxSigningSecrets {
		kept = kept[:MaxSigningSecrets]
	}
	s.Signing.Secrets = kept
	s.Signing.Disabled = false
	return sec, nil
}

// Signer returns the signer of deliveries at now, or nil when signing is
// off. Secrets that fail to parse are skipped (Validate refuses them).
func (s *Subscription) Signer(now time.Time) *webhooks.Signer {
	if s.Signing.Disabled {
		return nil
	}
	var sg webhooks.Signer
	for _, sec := range s.Signing.Secrets {
		if !sec.Active(now) {
			continue
		}
		if p, err := webhooks.ParseSecret(sec.Secret); err == nil {
			sg.Secrets = append(sg.Secrets, p)
		}
	}
	if len(sg.Secrets) == 0 {
		return nil
	}
	return &sg
}

// Redacted returns a copy without secret values (signing secrets, endpoint
// credentials), fit for any answer but the one that created them.
func (s *Subscription) Redacted() *Subscription {
	c := *s
	c.Topics = append([]string(nil), s.Topics...)
	c.Signing.Secrets = append([]SigningSecret(nil), s.Signing.Secrets...)
	for i := range c.Signing.Secrets {
		c.Signing.Secrets[i].Secret = ""
	}
	if a := s.Endpoint.Auth; a != nil {
		r := &EndpointAuth{}
		if len(a.Headers) > 0 {
			r.Headers = make(map[string]string, len(a.Headers))
			for k := range a.Headers {
				r.Headers[k] = redactedValue
			}
		}
		if a.BearerToken != "" {
			r.BearerToken = redactedValue
		}
		r.BasicUsername = a.BasicUsername
		if a.BasicPassword != "" {
			r.BasicPassword = redactedValue
		}
		if s := a.AWSSigV4; s != nil {
			v := *s
			r.AWSSigV4 = &v
		}
		if g := a.GoogleIDToken; g != nil {
			r.GoogleIDToken = &GoogleIDTokenAuth{Audience: g.Audience, CredentialsJSON: redact(g.CredentialsJSON)}
		}
		if o := a.OAuth2; o != nil {
			r.OAuth2 = &OAuth2ClientCredentials{TokenURL: o.TokenURL, ClientID: o.ClientID,
				ClientSecret: redact(o.ClientSecret), Scopes: append([]string(nil), o.Scopes...)}
		}
		if cc := a.ClientCertificate; cc != nil {
			r.ClientCertificate = &ClientCertificate{CertPEM: cc.CertPEM, KeyPEM: redact(cc.KeyPEM)}
		}
		c.Endpoint.Auth = r
	}
	return &c
}

// redactedValue stands in for a secret in answers.
const redactedValue = "[redacted]"

// ptrField returns f(p), or "" when p is nil.
func ptrField[T any](p *T, f func(*T) string) string {
	if p == nil {
		return ""
	}
	return f(p)
}

// redact returns what an answer shows of secret v.
func redact(v string) string {
	if v == "" {
		return ""
	}
	return redactedValue
}

// validateDelivery checks the delivery policy fields.
func (s *Subscription) validateDelivery(add func(field, msg string)) {
	if err := webhooks.Format(s.Format).Validate(); err != nil {
		add("format", `must be one of "raw", "cloudevents-binary", "cloudevents-structured", "envelope"`)
	}
	// Both go out as header values: CR, LF or NUL in them would fail every
	// request (or split it), after the subscription had been accepted.
	switch ct := s.ContentType; {
	case len(ct) > 255:
		add("content_type", "must be at most 255 characters")
	case textProblem(ct) != "":
		add("content_type", textProblem(ct))
	case ct != "":
		if mt, _, err := mime.ParseMediaType(ct); err != nil || !strings.Contains(mt, "/") {
			add("content_type", "must be a media type such as application/json")
		}
	}
	switch ce := s.CloudEventsType; {
	case len(ce) > 255:
		add("cloudevents_type", "must be at most 255 characters")
	case textProblem(ce) != "":
		add("cloudevents_type", textProblem(ce))
	}
	r := s.Retry
	if r.InitialIntervalMS < 0 || r.InitialIntervalMS > MaxRetryIntervalMS {
		add("retry.initial_interval_ms", fmt.Sprintf("must be between 0 (default) and %d", MaxRetryIntervalMS))
	}
	if r.MaxIntervalMS < 0 || r.MaxIntervalMS > MaxRetryIntervalMS {
		add("retry.max_interval_ms", fmt.Sprintf("must be between 0 (default) and %d", MaxRetryIntervalMS))
	}
	if r.InitialIntervalMS > 0 && r.MaxIntervalMS > 0 && r.MaxIntervalMS < r.InitialIntervalMS {
		add("retry.max_interval_ms", "must not be below retry.initial_interval_ms")
	}
	if r.Multiplier != 0 && (r.Multiplier < 1 || r.Multiplier > 10) {
		add("retry.multiplier", "must be between 1 and 10")
	}
	if r.Jitter < 0 || r.Jitter > 1 {
		add("retry.jitter", "must be between 0 and 1")
	}
	if r.MaxAttempts < 0 || r.MaxAttempts > 1000 {
		add("retry.max_attempts", "must be between 0 (unlimited) and 1000")
	}
	if r.MaxElapsedMS < 0 || r.MaxElapsedMS > MaxRetryElapsedMS {
		add("retry.max_elapsed_ms", fmt.Sprintf("must be between 0 (unlimited) and %d", MaxRetryElapsedMS))
	}
	if len(s.Signing.Secrets) > MaxSigningSecrets {
		add("signing.secrets", fmt.Sprintf("must hold at most %d secrets", MaxSigningSecrets))
	}
	for i, sec := range s.Signing.Secrets {
		if _, err := webhooks.ParseSecret(sec.Secret); err != nil {
			add("signing.secrets["+strconv.Itoa(i)+"].secret", `must be "whsec_" followed by base64 of 24 to 64 bytes`)
		}
	}
	if a := s.Endpoint.WebhookAuth(); a != nil {
		if err := a.Validate(); err != nil {
			add("endpoint.auth", err.Error())
		}
	}
	if a := s.Endpoint.Auth; a != nil {
		// "[redacted]" stands for a stored value; with none stored it
		// would be taken for the secret itself.
		for _, f := range []struct{ field, v string }{
			{"endpoint.auth.google_id_token.credentials_json", ptrField(a.GoogleIDToken, func(g *GoogleIDTokenAuth) string { return g.CredentialsJSON })},
			{"endpoint.auth.oauth2_client_credentials.client_secret", ptrField(a.OAuth2, func(o *OAuth2ClientCredentials) string { return o.ClientSecret })},
			{"endpoint.auth.client_certificate.key_pem", ptrField(a.ClientCertificate, func(c *ClientCertificate) string { return c.KeyPEM })},
		} {
			if f.v == redactedValue {
				add(f.field, "is "+redactedValue+" but no value is stored: send the secret")
			}
		}
	}
	if b := s.Batch; b != (Batch{}) {
		if b.MaxRecords < 0 || b.MaxRecords > MaxBatchRecords {
			add("batch.max_records", fmt.Sprintf("must be between 0 (off) and %d", MaxBatchRecords))
		}
		if b.MaxBytes < 0 || b.MaxBytes > MaxBatchBytes {
			add("batch.max_bytes", fmt.Sprintf("must be between 0 (1 MiB) and %d", MaxBatchBytes))
		}
		if b.MaxWaitMS < 0 || b.MaxWaitMS > MaxBatchWaitMS {
			add("batch.max_wait_ms", fmt.Sprintf("must be between 0 and %d", MaxBatchWaitMS))
		}
		if b.Enabled() && s.Format != "" && s.Format != string(webhooks.FormatEnvelope) {
			add("format", `must be "envelope" (or absent) with batching: a batch is a JSON list of envelopes`)
		}
	}
	if s.Endpoint.FollowRedirects < 0 || s.Endpoint.FollowRedirects > MaxFollowRedirects {
		add("endpoint.follow_redirects", fmt.Sprintf("must be between 0 and %d", MaxFollowRedirects))
	}
}
