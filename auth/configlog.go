package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/keyhook/keyhook/configlog"
)

// ConfigLog is where the Store records every token change before making
// it in Redis (configlog.Log implements it). An error from it fails the
// change and leaves Redis unchanged.
type ConfigLog interface {
	// Put records that kind/id has data at version.
	Put(ctx context.Context, kind, id string, version int64, data []byte) error
	// Delete records that kind/id is deleted; version is above the last
	// one it had.
	Delete(ctx context.Context, kind, id string, version int64) error
}

// LogKind names tokens in the config log, where a token is known by its
// hash, never its secret.
const LogKind = "token"

// ErrUnavailable is wrapped by Create, Ensure and Revoke when the config
// log did not record the change: nothing changed, try again.
var ErrUnavailable = errors.New("auth: kafka is not available; nothing changed")

func (s *Store) logPut(ctx context.Context, h string, version int64, data []byte) error {
	if err := s.log.Put(ctx, LogKind, h, version, data); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

// deleteVersion is the version of the revocation of a token stored at
// version: now, unless the clock is behind the token's own.
func (s *Store) deleteVersion(version int64) int64 {
	return max(s.now().UnixMilli(), version+1)
}

// logUndo records the revocation of a token the log recorded but Redis
// refused, so that no restore brings it in. Best effort: it is a token
// nobody holds the secret of, as its secret was never shown.
func (s *Store) logUndo(ctx context.Context, h string, version int64) {
	_ = s.log.Delete(ctx, LogKind, h, s.deleteVersion(version))
}

// logEnsure records what Ensure is about to store: the token, and the
// revocation of the token the name referred to before. done is true when
// nothing needs storing (the name already refers to the token) or when
// the secret is stored under another name (then err says so).
func (s *Store) logEnsure(ctx context.Context, name, h string, tok Token, data []byte) (done bool, err error) {
	old, err := s.rdb.HGet(ctx, s.keys.TokenNames(), name).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return true, fmt.Errorf("auth: ensure %q: %w", name, err)
	}
	cur, err := s.stored(ctx, h)
	if err != nil {
		return true, fmt.Errorf("auth: ensure %q: %w", name, err)
	}
	switch {
	case cur != nil && old == h:
		return true, nil
	case cur != nil:
		return true, fmt.Errorf("auth: ensure %q: the token is already stored under another name", name)
	}
	if old != "" {
		prev, err := s.stored(ctx, old)
		if err != nil {
			return true, fmt.Errorf("auth: ensure %q: %w", name, err)
		}
		if prev != nil {
			if err := s.log.Delete(ctx, LogKind, old, s.deleteVersion(prev.Version)); err != nil {
				return true, fmt.Errorf("auth: ensure %q: %w: %w", name, ErrUnavailable, err)
			}
		}
	}
	if err := s.logPut(ctx, h, tok.Version, data); err != nil {
		return true, fmt.Errorf("auth: ensure %q: %w", name, err)
	}
	return false, nil
}

// logRevoke records the revocation of the token named name; an unknown
// name gives an error wrapping ErrNotFound.
func (s *Store) logRevoke(ctx context.Context, name string) error {
	h, err := s.rdb.HGet(ctx, s.keys.TokenNames(), name).Result()
	if errors.Is(err, redis.Nil) {
		return fmt.Errorf("auth: revoke %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("auth: revoke %q: %w", name, err)
	}
	var version int64
	if tok, err := s.stored(ctx, h); err != nil {
		return fmt.Errorf("auth: revoke %q: %w", name, err)
	} else if tok != nil {
		version = tok.Version
	}
	if err := s.log.Delete(ctx, LogKind, h, s.deleteVersion(version)); err != nil {
		return fmt.Errorf("auth: revoke %q: %w: %w", name, ErrUnavailable, err)
	}
	return nil
}

// stored returns the record of the token hash h, or nil when none is
// stored.
func (s *Store) stored(ctx context.Context, h string) (*Token, error) {
	data, err := s.rdb.HGet(ctx, s.keys.Tokens(), h).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var tok Token
	if err := json.Unmarshal(data, &tok); err != nil {
		return nil, fmt.Errorf("decode token record: %w", err)
	}
	return &tok, nil
}

// Kind names tokens in the config log (configlog.Target).
func (s *Store) Kind() string { return LogKind }

// SnapshotEntries returns every stored token record, by hash, as the
// config log sees it (configlog.Target).
func (s *Store) SnapshotEntries(ctx context.Context) (map[string]configlog.Entry, error) {
	all, err := s.rdb.HGetAll(ctx, s.keys.Tokens()).Result()
	if err != nil {
		return nil, fmt.Errorf("auth: snapshot: %w", err)
	}
	out := make(map[string]configlog.Entry, len(all))
	for h, data := range all {
		var tok Token
		if err := json.Unmarshal([]byte(data), &tok); err != nil {
			return nil, fmt.Errorf("auth: snapshot: decode token record: %w", err)
		}
		out[h] = configlog.Entry{ID: h, Version: tok.Version, Data: []byte(data)}
	}
	return out, nil
}

// RestoreEntry stores e, a token record read from the config log, unless
// Redis holds it at e's version or above, or a newer token under its name
// (configlog.Target).
func (s *Store) RestoreEntry(ctx context.Context, e configlog.Entry) error {
	var tok Token
	if err := json.Unmarshal(e.Data, &tok); err != nil {
		return fmt.Errorf("auth: restore: decode token record: %w", err)
	}
	if msg := nameProblem(tok.Name); msg != "" {
		return fmt.Errorf("auth: restore: token name %q %s", tok.Name, msg)
	}
	err := restoreScript.Run(ctx, s.rdb, []string{s.keys.Tokens(), s.keys.TokenNames(), s.keys.TokenLastUsed()},
		e.ID, tok.Name, e.Data, e.Version).Err()
	if err != nil {
		return fmt.Errorf("auth: restore %q: %w", tok.Name, err)
	}
	return nil
}

// RemoveEntry removes the token the config log revoked unless Redis holds
// it at the revocation's version or above (configlog.Target).
func (s *Store) RemoveEntry(ctx context.Context, e configlog.Entry) error {
	err := removeScript.Run(ctx, s.rdb, []string{s.keys.Tokens(), s.keys.TokenNames(), s.keys.TokenLastUsed()}, e.ID, e.Version).Err()
	if err != nil {
		return fmt.Errorf("auth: remove: %w", err)
	}
	return nil
}
