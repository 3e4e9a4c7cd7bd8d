package subscription

import (
	"fmt"
	"mime"
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

// EndpointAuth authenticates deliveries to the endpoint. Its values are
// secrets: never returned after they are set.
type EndpointAuth struct {
	Headers       map[string]string `json:"headers,omitempty"`
	BearerToken   string            `json:"bearer_token,omitempty"`
	BasicUsername string            `json:"basic_username,omitempty"`
	BasicPassword string            `json:"basic_password,omitempty"`
}

// Auth converts to webhooks' form.
func (a *EndpointAuth) Auth() *webhooks.Auth {
	if a == nil {
		return nil
	}
	return &webhooks.Auth{Headers: a.Headers, BearerToken: a.BearerToken, BasicUser: a.BasicUsername, BasicPassword: a.BasicPassword}
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
		c.Endpoint.Auth = r
	}
	return &c
}

// redactedValue stands in for a secret in answers.
const redactedValue = "[redacted]"

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
	if a := s.Endpoint.Auth; a != nil {
		if err := a.Auth().Validate(); err != nil {
			add("endpoint.auth", err.Error())
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
