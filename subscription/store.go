package subscription

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotFound is returned (wrapped) by Get and Delete for an id that is not
// stored. Compare with errors.Is.
var ErrNotFound = errors.New("subscription: not found")

// IDPrefix starts every subscription id.
const IDPrefix = "sub_"

// idEncoding is lower-case base32 without padding: URL-safe, readable, and
// valid inside a Kafka consumer group id.
var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// idChars is how many base32 characters follow IDPrefix: 100 random bits.
const idChars = 20

// createAttempts bounds retries on an id collision, which 100 random bits
// make practically impossible; the bound only keeps a broken random
// source from looping forever.
const createAttempts = 3

// Store keeps subscriptions in Redis: one HASH from id to the
// subscription's JSON, and a Pub/Sub channel announcing each change. A
// Store is safe for concurrent use; many Stores, in many processes, may
// share one Redis and prefix.
type Store struct {
	rdb  redis.UniversalClient
	keys keys
	now  func() time.Time
	// idempotencyTTL is how long the record of an idempotent create
	// lives: IdempotencyTTL, shortened by tests.
	idempotencyTTL time.Duration
}

// NewStore returns a store on rdb whose keys start with prefix
// (DefaultPrefix, "keyhook", when prefix is ""). The caller owns rdb and
// closes it after the store's last use.
func NewStore(rdb redis.UniversalClient, prefix string) *Store {
	return &Store{rdb: rdb, keys: newKeys(prefix), now: time.Now, idempotencyTTL: IdempotencyTTL}
}

// Create normalizes and validates sub, assigns its ID ("sub_" and 20
// random base32 characters), CreatedAt, UpdatedAt and Version 1, then
// stores it and announces it on the change feed in one atomic step. An
// ID, timestamps or version already in sub are overwritten. A sub that
// fails Validate is not stored: the error is a *ValidationError.
func (s *Store) Create(ctx context.Context, sub *Subscription) error {
	if err := s.prepareCreate(sub); err != nil {
		return err
	}
	for range createAttempts {
		id := newID()
		sub.ID = id
		data, err := json.Marshal(sub)
		if err != nil {
			return fmt.Errorf("subscription: create: encode: %w", err)
		}
		stored, err := createScript.Run(ctx, s.rdb, []string{s.keys.subscriptions}, id, data, s.keys.changed).Int()
		if err != nil {
			return fmt.Errorf("subscription: create: %w", err)
		}
		if stored == 1 {
			return nil
		}
	}
	sub.ID = ""
	return fmt.Errorf("subscription: create: no free id after %d attempts", createAttempts)
}

// prepareCreate normalizes and validates sub and stamps it as a first
// version, for Create and CreateIdempotent.
func (s *Store) prepareCreate(sub *Subscription) error {
	sub.Normalize()
	if errs := sub.Validate(); len(errs) > 0 {
		return &ValidationError{Errors: errs}
	}
	now := s.now().UTC().Truncate(time.Millisecond)
	sub.CreatedAt, sub.UpdatedAt, sub.Version = now, now, 1
	return nil
}

// Get returns the subscription with the given id, or an error wrapping
// ErrNotFound.
func (s *Store) Get(ctx context.Context, id string) (*Subscription, error) {
	data, err := s.rdb.HGet(ctx, s.keys.subscriptions, id).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("subscription: get %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("subscription: get %q: %w", id, err)
	}
	sub, err := decode(id, data)
	if err != nil {
		return nil, fmt.Errorf("subscription: get: %w", err)
	}
	return sub, nil
}

// List returns every stored subscription, oldest first (by CreatedAt, then
// ID, so the order is stable). Each call returns new values the caller may
// keep and change.
func (s *Store) List(ctx context.Context) ([]*Subscription, error) {
	all, err := s.rdb.HGetAll(ctx, s.keys.subscriptions).Result()
	if err != nil {
		return nil, fmt.Errorf("subscription: list: %w", err)
	}
	subs := make([]*Subscription, 0, len(all))
	for id, data := range all {
		sub, err := decode(id, []byte(data))
		if err != nil {
			return nil, fmt.Errorf("subscription: list: %w", err)
		}
		subs = append(subs, sub)
	}
	slices.SortFunc(subs, func(a, b *Subscription) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return subs, nil
}

// Delete removes the subscription with the given id and announces it on
// the change feed in one atomic step. An id that is not stored gives an
// error wrapping ErrNotFound, and nothing is announced.
func (s *Store) Delete(ctx context.Context, id string) error {
	removed, err := deleteScript.Run(ctx, s.rdb, []string{s.keys.subscriptions}, id, s.keys.changed).Int()
	if err != nil {
		return fmt.Errorf("subscription: delete %q: %w", id, err)
	}
	if removed == 0 {
		return fmt.Errorf("subscription: delete %q: %w", id, ErrNotFound)
	}
	return nil
}

func decode(id string, data []byte) (*Subscription, error) {
	var sub Subscription
	if err := json.Unmarshal(data, &sub); err != nil {
		return nil, fmt.Errorf("decode %q: %w", id, err)
	}
	// The hash field is the identity; a body that says otherwise was not
	// written by Create.
	if sub.ID != id {
		return nil, fmt.Errorf("decode %q: stored id is %q", id, sub.ID)
	}
	return &sub, nil
}

func newID() string {
	var b [13]byte // 104 bits: the first 20 base32 characters carry 100
	// crypto/rand.Read never returns an error: it ends the program
	// instead, which is right for a broken random source.
	_, _ = rand.Read(b[:])
	return IDPrefix + idEncoding.EncodeToString(b[:])[:idChars]
}
