package subscription

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// IdempotencyTTL is how long CreateIdempotent remembers a key: 24 hours.
// A key used again after that creates a new subscription.
const IdempotencyTTL = 24 * time.Hour

// ErrIdempotencyKeyReused is returned (wrapped) by CreateIdempotent when
// the key was used, within IdempotencyTTL, by a request with another
// fingerprint. Compare with errors.Is.
var ErrIdempotencyKeyReused = errors.New("subscription: idempotency key reused for a different request")

// CreateIdempotent is Create for a request that the client may send more
// than once, identified by the client's key. fingerprint identifies the
// request's content (a hash of its body, say); it must not be empty or
// contain a newline.
//
// The first request with a key creates the subscription exactly as Create
// does and records, in the same atomic step, the fingerprint and the
// created subscription under the key for IdempotencyTTL. A later request
// with the same key and fingerprint creates nothing: sub is overwritten
// with the subscription first created, as it was then (even if it has
// changed or been deleted since), and replayed is true. A later request
// with the same key and another fingerprint creates nothing and gets an
// error wrapping ErrIdempotencyKeyReused. A sub that fails Validate gets a
// *ValidationError and nothing is recorded, so a corrected request may
// reuse the key.
//
// sub is changed only when the error is nil.
func (s *Store) CreateIdempotent(ctx context.Context, sub *Subscription, key, fingerprint string) (replayed bool, err error) {
	if key == "" {
		return false, errors.New("subscription: create: idempotency key is empty")
	}
	if fingerprint == "" || strings.ContainsRune(fingerprint, '\n') {
		return false, errors.New("subscription: create: fingerprint must be one non-empty line")
	}
	c := *sub
	if err := s.prepareCreate(&c); err != nil {
		return false, err
	}
	recordKey := s.keys.idempotency(key)
	for range createAttempts {
		c.ID = newID()
		data, err := json.Marshal(&c)
		if err != nil {
			return false, fmt.Errorf("subscription: create: encode: %w", err)
		}
		res, err := createIdempotentScript.Run(ctx, s.rdb, []string{s.keys.subscriptions, recordKey},
			c.ID, data, s.keys.changed, fingerprint, s.idempotencyTTL.Milliseconds()).Slice()
		if err != nil {
			return false, fmt.Errorf("subscription: create: %w", err)
		}
		code, record, err := scriptPair(res)
		if err != nil {
			return false, fmt.Errorf("subscription: create: %w", err)
		}
		switch code {
		case 1:
			*sub = c
			return false, nil
		case 2:
			fp, stored, ok := strings.Cut(record, "\n")
			if !ok {
				return false, fmt.Errorf("subscription: create: idempotency record is malformed")
			}
			if fp != fingerprint {
				return false, fmt.Errorf("subscription: create: %w", ErrIdempotencyKeyReused)
			}
			var first Subscription
			if err := json.Unmarshal([]byte(stored), &first); err != nil {
				return false, fmt.Errorf("subscription: create: decode idempotency record: %w", err)
			}
			*sub = first
			return true, nil
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
