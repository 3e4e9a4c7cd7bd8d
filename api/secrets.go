package api

import (
	"crypto/rand"
	"encoding/base32"
	"time"

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

// present returns what an answer shows of sub: signing secrets and
// endpoint credentials redacted, except the signing secrets whose ids are
// in shown, made by the request being answered: that answer is the only
// time their value is ever shown.
func present(sub *subscription.Subscription, shown map[string]bool) *subscription.Subscription {
	r := sub.Redacted()
	for i := range r.Signing.Secrets {
		if shown[r.Signing.Secrets[i].ID] {
			r.Signing.Secrets[i].Secret = sub.Signing.Secrets[i].Secret
		}
	}
	return r
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
//   - a redacted endpoint credential keeps the stored one;
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
