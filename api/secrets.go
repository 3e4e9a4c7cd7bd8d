package api

import (
	"bytes"
	"crypto/rand"
	"encoding/base32"
	"fmt"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/keyhook/keyhook/auth"
	"github.com/keyhook/keyhook/subscription"
)

// redacted is what subscription.Redacted shows in place of a secret. A
// request that sends it back (a subscription read, edited and PUT) keeps
// the stored value.
const redacted = "[redacted]"

// secretPrefixLen is how much of a secret its hint shows: "whsec_" and
// four characters, as subscription.NewSigningSecret makes them.
const secretPrefixLen = len("whsec_") + 4

var secretIDEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// present returns what an answer to r shows of sub: signing secrets and
// endpoint credentials redacted, except the signing secrets whose ids are
// in shown, made by the request being answered: that answer is the only
// time their value is ever shown. The basic-auth user name, shown to
// tokens that may change it, is redacted for the others.
func present(r *http.Request, sub *subscription.Subscription, shown map[string]bool) *subscription.Subscription {
	out := sub.Redacted()
	for i := range out.Signing.Secrets {
		if shown[out.Signing.Secrets[i].ID] {
			out.Signing.Secrets[i].Secret = sub.Signing.Secrets[i].Secret
		}
	}
	if a := out.Endpoint.Auth; a != nil && !allows(r, auth.ScopeWrite) {
		// User names go with the secrets: shown to those who may set them.
		if a.BasicUsername != "" {
			a.BasicUsername = redacted
		}
		if a.OAuth2 != nil && a.OAuth2.ClientID != "" {
			a.OAuth2.ClientID = redacted
		}
	}
	return out
}

// receipt is the answer to a change made with a token that may change a
// subscription but not read it: what the change made, and no more. The
// whole subscription would let a write-only token read it all through an
// empty PATCH.
type receipt struct {
	ID        string    `json:"id"`
	Version   int64     `json:"version"`
	UpdatedAt time.Time `json:"updated_at"`
	// Signing lists the signing secrets the change made, with their
	// values: as in every answer, shown once.
	Signing *receiptSigning `json:"signing,omitempty"`
}

type receiptSigning struct {
	Secrets []subscription.SigningSecret `json:"secrets"`
}

// answerFor returns what the answer to the change r made shows of sub:
// the subscription for a token that may read it, a receipt otherwise.
func answerFor(r *http.Request, sub *subscription.Subscription, shown map[string]bool) any {
	if allows(r, auth.ScopeRead) {
		return present(r, sub, shown)
	}
	rc := receipt{ID: sub.ID, Version: sub.Version, UpdatedAt: sub.UpdatedAt}
	for _, sec := range sub.Signing.Secrets {
		if shown[sec.ID] {
			if rc.Signing == nil {
				rc.Signing = &receiptSigning{}
			}
			rc.Signing.Secrets = append(rc.Signing.Secrets, sec)
		}
	}
	return rc
}

// allSecrets marks every signing secret of sub as shown.
func allSecrets(sub *subscription.Subscription) map[string]bool {
	shown := make(map[string]bool, len(sub.Signing.Secrets))
	for _, s := range sub.Signing.Secrets {
		shown[s.ID] = true
	}
	return shown
}

// resolveSecrets completes the secrets of next, a subscription as a
// client sent it, against cur, the stored one (nil on create), and
// returns the ids of the signing secrets it made (to be shown once):
//
//   - keepSigning (PUT) keeps cur's signing when next names none;
//   - a secret entry without a value, or with the redacted one, whose id
//     is stored keeps the stored value, hint and creation time (and the
//     stored expiry unless it sets one);
//   - a secret entry with a new value gets an id, a hint and a creation
//     time, whatever it claimed;
//   - a redacted endpoint credential (header, bearer token, basic
//     password, Google key, OAuth2 client id or secret, client key)
//     keeps the stored one;
//   - a subscription that signs and has no secret gets a new one.
func resolveSecrets(cur, next *subscription.Subscription, now time.Time, keepSigning bool) (map[string]bool, error) {
	shown := make(map[string]bool)
	if cur != nil && keepSigning && !next.Signing.Disabled && len(next.Signing.Secrets) == 0 {
		next.Signing.Secrets = append([]subscription.SigningSecret(nil), cur.Signing.Secrets...)
	}
	stored := make(map[string]subscription.SigningSecret)
	if cur != nil {
		for _, s := range cur.Signing.Secrets {
			stored[s.ID] = s
		}
	}
	secrets := make([]subscription.SigningSecret, len(next.Signing.Secrets))
	for i, s := range next.Signing.Secrets {
		old, known := stored[s.ID]
		switch {
		case known && (s.Secret == "" || s.Secret == redacted || s.Secret == old.Secret):
			expires := old.ExpiresAt
			if s.ExpiresAt != nil {
				expires = s.ExpiresAt
			}
			s = old
			s.ExpiresAt = expires
		case s.Secret == "" || s.Secret == redacted:
			// An unknown id without a value: left for Validate to refuse.
		default:
			s.ID = newSecretID()
			s.Hint = s.Secret[:min(len(s.Secret), secretPrefixLen)]
			s.CreatedAt = now.UTC().Truncate(time.Millisecond)
			shown[s.ID] = true
		}
		secrets[i] = s
	}
	if len(secrets) > 0 {
		next.Signing.Secrets = secrets
	}
	if cur != nil && cur.Endpoint.Auth != nil && next.Endpoint.Auth != nil {
		was, a := cur.Endpoint.Auth, next.Endpoint.Auth
		for k, v := range a.Headers {
			if v == redacted {
				a.Headers[k] = was.Headers[k]
			}
		}
		if a.BearerToken == redacted {
			a.BearerToken = was.BearerToken
		}
		if a.BasicPassword == redacted {
			a.BasicPassword = was.BasicPassword
		}
		if g := a.GoogleIDToken; g != nil && g.CredentialsJSON == redacted && was.GoogleIDToken != nil {
			g.CredentialsJSON = was.GoogleIDToken.CredentialsJSON
		}
		if o := a.OAuth2; o != nil && was.OAuth2 != nil {
			if o.ClientSecret == redacted {
				o.ClientSecret = was.OAuth2.ClientSecret
			}
			if o.ClientID == redacted {
				o.ClientID = was.OAuth2.ClientID
			}
		}
		if c := a.ClientCertificate; c != nil && c.KeyPEM == redacted && was.ClientCertificate != nil {
			c.KeyPEM = was.ClientCertificate.KeyPEM
		}
	}
	before := len(next.Signing.Secrets)
	if err := next.EnsureSigningSecret(now); err != nil {
		return nil, err
	}
	if before == 0 && len(next.Signing.Secrets) == 1 {
		shown[next.Signing.Secrets[0].ID] = true
	}
	return shown, nil
}

func newSecretID() string {
	var b [13]byte
	_, _ = rand.Read(b[:]) // never fails: crypto/rand ends the program instead
	return "sec_" + secretIDEncoding.EncodeToString(b[:])[:20]
}

// MaxRotationOverlap bounds how long a rotated-out secret may keep
// signing: 30 days.
const MaxRotationOverlap = 30 * 24 * time.Hour

// rotateBody is the body of POST …/signing/rotate; it may be empty.
type rotateBody struct {
	// OverlapSeconds is how long the previous secrets keep signing next to
	// the new one; absent means 24 hours.
	OverlapSeconds *int64 `json:"overlap_seconds"`
}

// rotateSigning puts a new server-generated secret first and shows its
// value once, in this answer; the previous secrets keep signing for the
// overlap, so endpoints can switch at their own pace.
func (h *handlers) rotateSigning(w http.ResponseWriter, r *http.Request) {
	body, p := h.readBody(w, r, mediaJSON)
	if p != nil {
		writeProblem(w, p)
		return
	}
	overlap := subscription.DefaultRotationOverlap
	if len(bytes.TrimSpace(body)) > 0 {
		var b rotateBody
		if _, p := decodeStrict(body, &b, nil); p != nil {
			writeProblem(w, p)
			return
		}
		if b.OverlapSeconds != nil {
			// Compared in seconds: multiplied first, a huge value would
			// wrap around into a valid-looking (even negative) Duration.
			if *b.OverlapSeconds < 0 || *b.OverlapSeconds > int64(MaxRotationOverlap/time.Second) {
				writeProblem(w, validationProblem([]subscription.FieldError{{Field: "overlap_seconds",
					Message: fmt.Sprintf("must be between 0 and %d", int64(MaxRotationOverlap/time.Second))}}))
				return
			}
			overlap = time.Duration(*b.OverlapSeconds) * time.Second
		}
	}
	id := chi.URLParam(r, "id")
	expected, ok := h.precondition(w, r, id)
	if !ok {
		return
	}
	var created subscription.SigningSecret
	stored, err := h.deps.Store.Update(r.Context(), id, expected, func(cur *subscription.Subscription) error {
		var err error
		created, err = cur.RotateSigningSecret(h.cfg.Now(), overlap)
		return err
	})
	h.answerChange(w, r, id, stored, map[string]bool{created.ID: true}, err)
}
