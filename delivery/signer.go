package delivery

import (
	"time"

	"github.com/keyhook/keyhook/webhooks"
)

// signerState is a signer and the time it stops being right.
type signerState struct {
	signer *webhooks.Signer
	until  time.Time // zero: until the subscription changes
}

// Signer returns the subscription's signer of the moment, nil when it
// does not sign. It is rebuilt when a rotated-out secret expires, so an
// expired secret stops signing without a new subscription version. Two
// deliveries racing at the expiry both rebuild the same signer; either
// result is right.
func (e *Endpoint) Signer() *webhooks.Signer {
	now := e.now()
	if st := e.signing.Load(); st != nil && (st.until.IsZero() || now.Before(st.until)) {
		return st.signer
	}
	st := &signerState{signer: e.sub.Signer(now)}
	for _, sec := range e.sub.Signing.Secrets {
		if sec.ExpiresAt != nil && sec.ExpiresAt.After(now) && (st.until.IsZero() || sec.ExpiresAt.Before(st.until)) {
			st.until = *sec.ExpiresAt
		}
	}
	e.signing.Store(st)
	return st.signer
}
