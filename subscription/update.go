package subscription

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// AnyVersion, given as the expected version to Update, Replace or
// DeleteVersion, skips the version check: the change applies to whatever
// version is stored. Stored versions start at 1.
const AnyVersion int64 = 0

// ErrVersionMismatch is returned (wrapped) by Update, Replace and
// DeleteVersion when the stored version is not the expected one: someone
// else changed the subscription first. Nothing was changed. Compare with
// errors.Is.
var ErrVersionMismatch = errors.New("subscription: version mismatch")

// updateAttempts bounds how often Update re-reads and retries when, with
// AnyVersion, another writer keeps winning the compare-and-set.
const updateAttempts = 5

// Update changes the subscription with the given id in one atomic
// compare-and-set: it reads the stored subscription, checks its version
// against expectedVersion (unless AnyVersion), hands a copy to fn, then
// stores fn's result as the next version, with UpdatedAt set to now, and
// announces it on the change feed, unless another writer stored a version
// in between. It returns the subscription as stored.
//
// fn changes the user-settable fields of its argument; changes to ID,
// CreatedAt, UpdatedAt and Version are ignored. An error from fn aborts
// the update and is returned as is. The result is normalized and
// validated: a failure is a *ValidationError and stores nothing. A result
// equal to the stored subscription stores nothing and keeps the version:
// the version counts changes, and each one restarts the subscription's
// consumers.
//
// An unknown id gives an error wrapping ErrNotFound. A stored version
// other than expectedVersion, at the read or at the write, gives an error
// wrapping ErrVersionMismatch. With AnyVersion, a lost race is retried on
// the newer version (fn is called again), a few times.
func (s *Store) Update(ctx context.Context, id string, expectedVersion int64, fn func(*Subscription) error) (*Subscription, error) {
	if fn == nil {
		return nil, errors.New("subscription: update: fn is nil")
	}
	for range updateAttempts {
		data, err := s.rdb.HGet(ctx, s.keys.Subscriptions(), id).Bytes()
		if errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("subscription: update %q: %w", id, ErrNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("subscription: update %q: %w", id, err)
		}
		cur, err := decode(id, data)
		if err != nil {
			return nil, fmt.Errorf("subscription: update: %w", err)
		}
		if expectedVersion != AnyVersion && cur.Version != expectedVersion {
			return nil, fmt.Errorf("subscription: update %q: stored version is %d, not %d: %w", id, cur.Version, expectedVersion, ErrVersionMismatch)
		}
		// A second decode is a deep copy that fn may change freely.
		next, err := decode(id, data)
		if err != nil {
			return nil, fmt.Errorf("subscription: update: %w", err)
		}
		if err := fn(next); err != nil {
			return nil, err
		}
		next.ID, next.CreatedAt, next.UpdatedAt, next.Version = cur.ID, cur.CreatedAt, cur.UpdatedAt, cur.Version
		keepPauseReason(cur, next)
		next.Normalize()
		if errs := next.Validate(); len(errs) > 0 {
			return nil, &ValidationError{Errors: errs}
		}
		same, err := sameJSON(cur, next)
		if err != nil {
			return nil, fmt.Errorf("subscription: update: %w", err)
		}
		if same {
			return cur, nil
		}
		next.UpdatedAt = s.now().UTC().Truncate(time.Millisecond)
		next.Version = cur.Version + 1
		newData, err := json.Marshal(next)
		if err != nil {
			return nil, fmt.Errorf("subscription: update: encode: %w", err)
		}
		if err := s.logPut(ctx, id, next.Version, newData); err != nil {
			return nil, fmt.Errorf("subscription: update %q: %w", id, err)
		}
		code, stored, err := s.runVersioned(ctx, updateScript, id, cur.Version, newData)
		if err != nil {
			return nil, fmt.Errorf("subscription: update %q: %w", id, err)
		}
		switch code {
		case 1:
			return next, nil
		case 0:
			s.relogDeleted(ctx, id, next.Version)
			return nil, fmt.Errorf("subscription: update %q: %w", id, ErrNotFound)
		}
		s.relog(ctx, id)
		if expectedVersion != AnyVersion {
			return nil, fmt.Errorf("subscription: update %q: stored version is %d, not %d: %w", id, stored, expectedVersion, ErrVersionMismatch)
		}
	}
	return nil, fmt.Errorf("subscription: update %q: changed concurrently %d times in a row: %w", id, updateAttempts, ErrVersionMismatch)
}

// Replace sets every user-settable field of the stored subscription
// sub.ID to sub's (a PUT: fields sub leaves empty take their defaults),
// as Update does with expectedVersion, and on success sets *sub to the
// subscription as stored.
func (s *Store) Replace(ctx context.Context, sub *Subscription, expectedVersion int64) error {
	stored, err := s.Update(ctx, sub.ID, expectedVersion, func(cur *Subscription) error {
		*cur = *sub
		return nil
	})
	if err != nil {
		return err
	}
	*sub = *stored
	return nil
}

// DeleteVersion removes the subscription with the given id, as Delete
// does, if its stored version is expectedVersion (any version with
// AnyVersion). Another stored version gives an error wrapping
// ErrVersionMismatch and removes nothing.
func (s *Store) DeleteVersion(ctx context.Context, id string, expectedVersion int64) error {
	if s.log != nil {
		return s.deleteLogged(ctx, id, expectedVersion)
	}
	if expectedVersion == AnyVersion {
		return s.Delete(ctx, id)
	}
	code, stored, err := s.runVersioned(ctx, deleteVersionScript, id, expectedVersion, nil)
	if err != nil {
		return fmt.Errorf("subscription: delete %q: %w", id, err)
	}
	switch code {
	case 1:
		return nil
	case 0:
		return fmt.Errorf("subscription: delete %q: %w", id, ErrNotFound)
	default:
		return fmt.Errorf("subscription: delete %q: stored version is %d, not %d: %w", id, stored, expectedVersion, ErrVersionMismatch)
	}
}

// deleteLogged is Delete and DeleteVersion with a config log: the delete
// is recorded, with the version after the stored one, before Redis's
// compare-and-set removes that version. With AnyVersion a lost race is
// retried on the newer version, a few times.
func (s *Store) deleteLogged(ctx context.Context, id string, expectedVersion int64) error {
	for range updateAttempts {
		data, err := s.rdb.HGet(ctx, s.keys.Subscriptions(), id).Bytes()
		if errors.Is(err, redis.Nil) {
			return fmt.Errorf("subscription: delete %q: %w", id, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("subscription: delete %q: %w", id, err)
		}
		cur, err := decode(id, data)
		if err != nil {
			return fmt.Errorf("subscription: delete: %w", err)
		}
		if expectedVersion != AnyVersion && cur.Version != expectedVersion {
			return fmt.Errorf("subscription: delete %q: stored version is %d, not %d: %w", id, cur.Version, expectedVersion, ErrVersionMismatch)
		}
		if err := s.logDelete(ctx, id, cur.Version); err != nil {
			return fmt.Errorf("subscription: delete %q: %w", id, err)
		}
		code, stored, err := s.runVersioned(ctx, deleteVersionScript, id, cur.Version, nil)
		if err != nil {
			return fmt.Errorf("subscription: delete %q: %w", id, err)
		}
		if code >= 0 {
			// 0: gone already — the restorer applied this delete from the
			// log first, or another delete won; either way it is deleted.
			return nil
		}
		// Another change won: its record must follow the tombstone.
		s.relog(ctx, id)
		if expectedVersion != AnyVersion {
			return fmt.Errorf("subscription: delete %q: stored version is %d, not %d: %w", id, stored, expectedVersion, ErrVersionMismatch)
		}
	}
	return fmt.Errorf("subscription: delete %q: changed concurrently %d times in a row: %w", id, updateAttempts, ErrVersionMismatch)
}

// runVersioned runs updateScript (with data) or deleteVersionScript
// (data nil) and returns its {code, stored version} result.
func (s *Store) runVersioned(ctx context.Context, script *redis.Script, id string, expected int64, data []byte) (code, stored int64, err error) {
	args := []any{id, expected}
	if data != nil {
		args = append(args, data)
	}
	args = append(args, s.keys.SubscriptionsChanged())
	res, err := script.Run(ctx, s.rdb, []string{s.keys.Subscriptions(), s.keys.SubscriptionDeleted(id), s.keys.SubscriptionsVersion()}, args...).Int64Slice()
	if err != nil {
		return 0, 0, err
	}
	if len(res) != 2 {
		return 0, 0, fmt.Errorf("script returned %d values, want 2", len(res))
	}
	return res[0], res[1], nil
}

func sameJSON(a, b *Subscription) (bool, error) {
	ja, err := json.Marshal(a)
	if err != nil {
		return false, err
	}
	jb, err := json.Marshal(b)
	if err != nil {
		return false, err
	}
	return bytes.Equal(ja, jb), nil
}

// keepPauseReason carries who paused a subscription, and why, over a
// change that keeps it paused without saying so itself (a PATCH or PUT,
// where the fields are read-only), and drops both once it is resumed.
func keepPauseReason(cur, next *Subscription) {
	switch {
	case !next.Paused:
		next.PausedBy, next.PausedReason = "", ""
	case next.PausedBy == "" && next.PausedReason == "" && cur.Paused:
		next.PausedBy, next.PausedReason = cur.PausedBy, cur.PausedReason
	}
}
