package subscription

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/keyhook/keyhook/internal/keyspace"
	"github.com/redis/go-redis/v9"
)

// ErrNotFound is returned (wrapped) by Get and Delete for an id that is not
// stored. Compare with errors.Is.
var ErrNotFound = errors.New("subscription: not found")

// ErrUnavailable marks an operation on a subscription's Kafka side that
// could not be done because Kafka does not answer yet (no group
// coordinator, a broker restarting): the caller may try again shortly.
var ErrUnavailable = errors.New("subscription: kafka is not available; try again")

// IDPrefix starts every subscription id.
const IDPrefix = "sub_"

// idEncoding is lower-case base32 without padding: URL-safe, readable, and
// valid inside a Kafka consumer group id.
var idEncoding = base32.NewEncoding(idAlphabet).WithPadding(base32.NoPadding)

const idAlphabet = "abcdefghijklmnopqrstuvwxyz234567"

// idChars is how many base32 characters follow IDPrefix: 100 random bits.
const idChars = 20

// createAttempts bounds retries on an id collision, which 100 random bits
// make practically impossible; the bound only keeps a broken random
// source from looping forever.
const createAttempts = 3

// Defaults of Config, applied to fields left at zero.
const (
	// DefaultPrefix starts every key and channel when Config.Prefix is
	// empty.
	DefaultPrefix = keyspace.DefaultPrefix
	// DefaultIdempotencyTTL is how long CreateIdempotent remembers a key
	// when Config.IdempotencyTTL is zero: 24 hours.
	DefaultIdempotencyTTL = 24 * time.Hour
)

// Config holds the Store's tunables. The zero value means defaults.
type Config struct {
	// Prefix starts every key and channel the Store uses (their layout is
	// internal/keyspace's), so several keyhook installations can share
	// one Redis. It must not contain '{' or '}', which would move the
	// Redis Cluster hash tags. Default "keyhook".
	Prefix string
	// IdempotencyTTL is how long CreateIdempotent remembers a key: a key
	// used again after that creates a new subscription. At least a
	// millisecond; default 24 hours.
	IdempotencyTTL time.Duration
	// Log, when not nil, records every change before it is made in Redis
	// (a configlog.Log), so that a Redis that loses data can be rebuilt
	// from it; a change it refuses fails with an error wrapping
	// ErrUnavailable and leaves Redis unchanged. Default nil: Redis only.
	Log ConfigLog
}

// Validate reports the first invalid field of c. Zero fields are valid:
// they mean the default.
func (c Config) Validate() error {
	if err := (keyspace.Keyspace{Prefix: c.Prefix}).Validate(); err != nil {
		return fmt.Errorf("subscription: config: Prefix: %w", err)
	}
	if c.IdempotencyTTL < 0 || (c.IdempotencyTTL > 0 && c.IdempotencyTTL < time.Millisecond) {
		return fmt.Errorf("subscription: config: IdempotencyTTL %v must be 0 (default %v) or at least 1ms", c.IdempotencyTTL, DefaultIdempotencyTTL)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.IdempotencyTTL == 0 {
		c.IdempotencyTTL = DefaultIdempotencyTTL
	}
	return c
}

// Store keeps subscriptions in Redis: one HASH from id to the
// subscription's JSON, and a Pub/Sub channel announcing each change. A
// Store is safe for concurrent use; many Stores, in many processes, may
// share one Redis and prefix.
type Store struct {
	rdb            redis.UniversalClient
	keys           keyspace.Keyspace
	idempotencyTTL time.Duration
	log            ConfigLog
	now            func() time.Time
}

// New returns a Store over rdb, which the caller keeps ownership of (and
// closes after the store's last use). It returns an error naming the bad
// field when cfg is invalid.
func New(rdb redis.UniversalClient, cfg Config) (*Store, error) {
	if rdb == nil {
		return nil, errors.New("subscription: new: nil redis client")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Store{rdb: rdb, keys: keyspace.Keyspace{Prefix: cfg.Prefix}, idempotencyTTL: cfg.IdempotencyTTL, log: cfg.Log, now: time.Now}, nil
}

// Create normalizes and validates sub, assigns its ID ("sub_" and 20
// random base32 characters), CreatedAt, UpdatedAt and Version 1, then
// stores it and announces it on the change feed in one atomic step.
// Timestamps or version already in sub are overwritten, and so is an ID,
// unless NewID made it: such an ID is kept (an error wrapping ErrIDTaken
// if a subscription has it). A sub that fails Validate is not stored: the
// error is a *ValidationError.
func (s *Store) Create(ctx context.Context, sub *Subscription) error {
	if err := s.prepareCreate(sub); err != nil {
		return err
	}
	reserved := reservedID(sub.ID)
	if err := s.checkReserved(ctx, sub.ID, reserved); err != nil {
		return err
	}
	for range createAttempts {
		id := newID()
		if reserved {
			id = sub.ID
		}
		sub.ID = id
		data, err := json.Marshal(sub)
		if err != nil {
			return fmt.Errorf("subscription: create: encode: %w", err)
		}
		if err := s.logPut(ctx, id, sub.Version, data); err != nil {
			return fmt.Errorf("subscription: create: %w", err)
		}
		stored, err := createScript.Run(ctx, s.rdb, []string{s.keys.Subscriptions(), s.keys.SubscriptionsVersion()}, id, data, s.keys.SubscriptionsChanged()).Int()
		if err != nil {
			return fmt.Errorf("subscription: create: %w", err)
		}
		if stored == 1 {
			return nil
		}
		if reserved {
			return fmt.Errorf("subscription: create %q: %w", id, ErrIDTaken)
		}
	}
	sub.ID = ""
	return fmt.Errorf("subscription: create: no free id after %d attempts", createAttempts)
}

// checkReserved refuses a reserved id that is taken before the config log
// records a create that Redis would refuse.
func (s *Store) checkReserved(ctx context.Context, id string, reserved bool) error {
	if !reserved || s.log == nil {
		return nil
	}
	taken, err := s.rdb.HExists(ctx, s.keys.Subscriptions(), id).Result()
	if err != nil {
		return fmt.Errorf("subscription: create: %w", err)
	}
	if taken {
		return fmt.Errorf("subscription: create %q: %w", id, ErrIDTaken)
	}
	return nil
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
	data, err := s.rdb.HGet(ctx, s.keys.Subscriptions(), id).Bytes()
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
	all, err := s.rdb.HGetAll(ctx, s.keys.Subscriptions()).Result()
	if err != nil {
		return nil, fmt.Errorf("subscription: list: %w", err)
	}
	return decodeAll(all)
}

// decodeAll decodes a HGETALL of the subscriptions hash, oldest first.
func decodeAll(all map[string]string) ([]*Subscription, error) {
	subs := make([]*Subscription, 0, len(all))
	for id, data := range all {
		sub, err := decode(id, []byte(data))
		if err != nil {
			return nil, fmt.Errorf("subscription: list: %w", err)
		}
		subs = append(subs, sub)
	}
	sortSubs(subs)
	return subs, nil
}

// Delete removes the subscription with the given id and announces it on
// the change feed in one atomic step. An id that is not stored gives an
// error wrapping ErrNotFound, and nothing is announced.
func (s *Store) Delete(ctx context.Context, id string) error {
	if s.log != nil {
		return s.deleteLogged(ctx, id, AnyVersion)
	}
	removed, err := deleteScript.Run(ctx, s.rdb, []string{s.keys.Subscriptions(), s.keys.SubscriptionDeleted(id), s.keys.SubscriptionsVersion()}, id, s.keys.SubscriptionsChanged()).Int()
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

// ErrIDTaken is wrapped by Create and CreateIdempotent when a
// subscription already has the ID the caller reserved with NewID; nothing
// was stored.
var ErrIDTaken = errors.New("subscription: id taken")

// NewID returns a fresh subscription ID. It is for a caller that must
// prepare something keyed by the ID before the subscription exists (the
// start offsets of its consumer group, which no node may read before they
// are committed): set it on the subscription, prepare, then Create or
// CreateIdempotent, which keep an ID of this form.
func NewID() string { return newID() }

// reservedID reports whether id has the form NewID gives it.
func reservedID(id string) bool {
	rest, ok := strings.CutPrefix(id, IDPrefix)
	if !ok || len(rest) != idChars {
		return false
	}
	for _, c := range rest {
		if !strings.ContainsRune(idAlphabet, c) {
			return false
		}
	}
	return true
}

func newID() string {
	var b [13]byte // 104 bits: the first 20 base32 characters carry 100
	// crypto/rand.Read never returns an error: it ends the program
	// instead, which is right for a broken random source.
	_, _ = rand.Read(b[:])
	return IDPrefix + idEncoding.EncodeToString(b[:])[:idChars]
}
