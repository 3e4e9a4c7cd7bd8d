package subscription

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ErrIdempotencyKeyReused is returned (wrapped) by CreateIdempotent when
// the caller used the key, within the idempotency TTL, for a request with
// another fingerprint. Compare with errors.Is.
var ErrIdempotencyKeyReused = errors.New("subscription: idempotency key reused for a different request")

// Idempotency identifies a create that its caller may send more than once.
type Idempotency struct {
	// Caller is who sends the request: the name of the API token, never
	// its value. Keys are scoped to it, so one caller's key never
	// answers, nor blocks, another caller's request. Required.
	Caller string
	// Key is the caller's Idempotency-Key. Required.
	Key string
	// Fingerprint identifies the request's content (a hash of its body,
	// say): one non-empty line.
	Fingerprint string
}

// CreateIdempotent is Create for a request that the caller may send more
// than once, identified by req.
//
// The first request with a caller's key creates the subscription exactly
// as Create does and records, in the same atomic step, the fingerprint
// and the created subscription under the (caller, key) pair for the
// idempotency TTL (Config.IdempotencyTTL, 24 hours by default). A later
// request from the same caller with the same key and fingerprint creates
// nothing: sub is overwritten with the subscription first created, as it
// was then (even if it has changed or been deleted since), and replayed is
// true. The replay carries no secret: the record is kept redacted
// (Subscription.Redacted), so its signing secrets have no value and its
// endpoint credentials are "[redacted]"; a secret is shown once, to the
// request that made it. A later request from the same caller with the same
// key and another fingerprint creates nothing and gets an error wrapping
// ErrIdempotencyKeyReused. The same key from another caller is another
// request. A sub that fails Validate gets a *ValidationError and nothing
// is recorded, so a corrected request may reuse the key.
//
// sub is changed only when the error is nil.
func (s *Store) CreateIdempotent(ctx context.Context, sub *Subscription, req Idempotency) (replayed bool, err error) {
	switch {
	case req.Caller == "":
		return false, errors.New("subscription: create: idempotency caller is empty")
	case req.Key == "":
		return false, errors.New("subscription: create: idempotency key is empty")
	case req.Fingerprint == "" || strings.ContainsRune(req.Fingerprint, '\n'):
		return false, errors.New("subscription: create: fingerprint must be one non-empty line")
	}
	c := *sub
	if err := s.prepareCreate(&c); err != nil {
		return false, err
	}
	recordKey := s.keys.Idempotency(req.Caller, req.Key)
	reserved := reservedID(c.ID)
	// With a config log, a repeated request must not record a create
	// that Redis then refuses: look for its record first.
	logged := false
	if s.log != nil {
		n, err := s.rdb.Exists(ctx, recordKey).Result()
		if err != nil {
			return false, fmt.Errorf("subscription: create: %w", err)
		}
		if n == 0 {
			if err := s.checkReserved(ctx, c.ID, reserved); err != nil {
				return false, err
			}
			logged = true
		}
	}
	for range createAttempts {
		if !reserved {
			c.ID = newID()
		}
		data, err := json.Marshal(&c)
		if err != nil {
			return false, fmt.Errorf("subscription: create: encode: %w", err)
		}
		record, err := json.Marshal(c.Redacted())
		if err != nil {
			return false, fmt.Errorf("subscription: create: encode: %w", err)
		}
		if logged {
			if err := s.logPut(ctx, c.ID, c.Version, data); err != nil {
				return false, fmt.Errorf("subscription: create: %w", err)
			}
		}
		res, err := createIdempotentScript.Run(ctx, s.rdb, []string{s.keys.Subscriptions(), recordKey, s.keys.SubscriptionsVersion()},
			c.ID, data, s.keys.SubscriptionsChanged(), req.Fingerprint+"\n"+string(record), s.idempotencyTTL.Milliseconds()).Slice()
		if err != nil {
			return false, fmt.Errorf("subscription: create: %w", err)
		}
		code, stored, err := scriptPair(res)
		if err != nil {
			return false, fmt.Errorf("subscription: create: %w", err)
		}
		switch code {
		case 1:
			*sub = c
			return false, nil
		case 2:
			if logged {
				// A twin request won the race between the look-up and
				// the script: the create recorded here never happened.
				_ = s.logDelete(ctx, c.ID, c.Version)
			}
			fp, first, ok := strings.Cut(stored, "\n")
			if !ok {
				return false, fmt.Errorf("subscription: create: idempotency record is malformed")
			}
			if fp != req.Fingerprint {
				return false, fmt.Errorf("subscription: create: %w", ErrIdempotencyKeyReused)
			}
			var was Subscription
			if err := json.Unmarshal([]byte(first), &was); err != nil {
				return false, fmt.Errorf("subscription: create: decode idempotency record: %w", err)
			}
			*sub = was
			return true, nil
		}
		if reserved {
			return false, fmt.Errorf("subscription: create %q: %w", c.ID, ErrIDTaken)
		}
	}
	return false, fmt.Errorf("subscription: create: no free id after %d attempts", createAttempts)
}

// scriptPair reads the {integer, string} result of a script.
func scriptPair(res []any) (int64, string, error) {
	if len(res) != 2 {
		return 0, "", fmt.Errorf("script returned %d values, want 2", len(res))
	}
	code, ok := res[0].(int64)
	if !ok {
		return 0, "", fmt.Errorf("script returned %T as its code", res[0])
	}
	switch v := res[1].(type) {
	case string:
		return code, v, nil
	case int64:
		return code, fmt.Sprint(v), nil
	default:
		return 0, "", fmt.Errorf("script returned %T as its value", res[1])
	}
}
