package subscription

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/keyhook/keyhook/configlog"
)

// ConfigLog is where the Store records every change before making it in
// Redis, so that a Redis that loses data can be rebuilt (configlog.Log
// implements it). An error from it fails the change and leaves Redis
// unchanged.
type ConfigLog interface {
	// Put records that kind/id has data at version.
	Put(ctx context.Context, kind, id string, version int64, data []byte) error
	// Restate records again what Redis holds for kind/id after a change
	// the log recorded lost its race in Redis, so that the winner's record
	// is the log's last.
	Restate(ctx context.Context, kind, id string, version int64, data []byte) error
	// Delete records that kind/id is deleted; version is above the last
	// one it had.
	Delete(ctx context.Context, kind, id string, version int64) error
}

// LogKind names subscriptions in the config log.
const LogKind = "subscription"

// logPut records a subscription's new version in the config log, if the
// Store has one; a failure wraps ErrUnavailable.
func (s *Store) logPut(ctx context.Context, id string, version int64, data []byte) error {
	if s.log == nil {
		return nil
	}
	if err := s.log.Put(ctx, LogKind, id, version, data); err != nil {
		if errors.Is(err, configlog.ErrStale) {
			// Read from a Redis that lost data the log holds: another
			// version is the truth, as after a concurrent change.
			return fmt.Errorf("%w: %w", ErrVersionMismatch, err)
		}
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

// logDelete records a subscription's delete in the config log, if the
// Store has one, with the version after the deleted one; a failure wraps
// ErrUnavailable.
func (s *Store) logDelete(ctx context.Context, id string, deleted int64) error {
	if s.log == nil {
		return nil
	}
	if err := s.log.Delete(ctx, LogKind, id, deleted+1); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

// relog records again what Redis holds for id after a change that the
// log recorded lost its compare-and-set in Redis: the record of the
// change that won must be the log's last one for id, so that the log, and
// a Redis rebuilt from it, agrees with what the callers were told.
func (s *Store) relog(ctx context.Context, id string) {
	if s.log == nil {
		return
	}
	data, err := s.rdb.HGet(ctx, s.keys.Subscriptions(), id).Bytes()
	if err != nil {
		// Gone (a delete won; its tombstone is the later record) or
		// Redis unreachable (the restorer adopts what Redis holds).
		return
	}
	sub, err := decode(id, data)
	if err != nil {
		return
	}
	_ = s.log.Restate(ctx, LogKind, id, sub.Version, data)
}

// relogDeleted follows a change the log recorded, at version, for a
// subscription a delete removed from Redis before the change reached it,
// with the delete again: the delete's record may precede the change's in
// the log, and the log must end deleted. A subscription gone without a
// delete (a Redis that lost data) keeps the change: the restorer brings
// the subscription back.
func (s *Store) relogDeleted(ctx context.Context, id string, version int64) {
	if s.log == nil {
		return
	}
	if n, err := s.rdb.Exists(ctx, s.keys.SubscriptionDeleted(id)).Result(); err != nil || n == 0 {
		return
	}
	_ = s.log.Delete(ctx, LogKind, id, version)
}

// Kind names subscriptions in the config log (configlog.Target).
func (s *Store) Kind() string { return LogKind }

// SnapshotEntries returns every stored subscription as the config log
// sees it (configlog.Target).
func (s *Store) SnapshotEntries(ctx context.Context) (map[string]configlog.Entry, error) {
	all, err := s.rdb.HGetAll(ctx, s.keys.Subscriptions()).Result()
	if err != nil {
		return nil, fmt.Errorf("subscription: snapshot: %w", err)
	}
	out := make(map[string]configlog.Entry, len(all))
	for id, data := range all {
		var v struct {
			Version int64 `json:"version"`
		}
		if err := json.Unmarshal([]byte(data), &v); err != nil {
			return nil, fmt.Errorf("subscription: snapshot: decode %q: %w", id, err)
		}
		out[id] = configlog.Entry{ID: id, Version: v.Version, Data: []byte(data)}
	}
	return out, nil
}

// RestoreEntry stores e, a subscription read from the config log, and
// announces it, unless Redis holds it at e's version or above
// (configlog.Target).
func (s *Store) RestoreEntry(ctx context.Context, e configlog.Entry) error {
	if _, err := decode(e.ID, e.Data); err != nil {
		return fmt.Errorf("subscription: restore: %w", err)
	}
	if err := restoreScript.Run(ctx, s.rdb, []string{s.keys.Subscriptions(), s.keys.SubscriptionsVersion()}, e.ID, e.Version, e.Data, s.keys.SubscriptionsChanged()).Err(); err != nil {
		return fmt.Errorf("subscription: restore %q: %w", e.ID, err)
	}
	return nil
}

// RemoveEntry removes the subscription the config log deleted, and
// announces it, unless Redis holds it at the delete's version or above
// (configlog.Target).
func (s *Store) RemoveEntry(ctx context.Context, e configlog.Entry) error {
	if err := removeScript.Run(ctx, s.rdb, []string{s.keys.Subscriptions(), s.keys.SubscriptionsVersion()}, e.ID, e.Version, s.keys.SubscriptionsChanged()).Err(); err != nil {
		return fmt.Errorf("subscription: remove %q: %w", e.ID, err)
	}
	return nil
}

// Mark returns the set's version, which every change the Store makes
// moves (configlog.Marked): the config log's restorer snapshots the set
// only when it moved.
func (s *Store) Mark(ctx context.Context) (string, error) {
	v, err := s.version(ctx)
	if err != nil {
		return "", err
	}
	return strconv.FormatInt(v, 10), nil
}
