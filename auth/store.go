package auth

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/keyhook/keyhook/internal/keyspace"
	"github.com/redis/go-redis/v9"
)

// TokenPrefix starts every token that Generate makes.
const TokenPrefix = "kh_"

// tokenBytes is how much randomness a generated token carries: 256 bits.
const tokenBytes = 32

// Limits on what the store accepts.
const (
	// MinSecretLength is the shortest token Ensure accepts, in bytes.
	// A generated token is 46 bytes.
	MinSecretLength = 32
	// MaxSecretLength is the longest token Ensure and Authenticate
	// accept, in bytes: longer input is refused without a Redis call.
	MaxSecretLength = 256
	// MaxNameLength is the longest token name.
	MaxNameLength = 64
)

// LastUsedResolution is how stale a token's LastUsed may be: a use is
// written to Redis at most this often per token and Store, so that
// authentication costs one read, not a write, per request.
const LastUsedResolution = time.Minute

// Errors of the store, returned wrapped; compare with errors.Is.
var (
	// ErrInvalidToken is returned by Authenticate for a token that is not
	// stored (never created, revoked, or malformed).
	ErrInvalidToken = errors.New("auth: invalid token")
	// ErrNameTaken is returned by Create for a name already in use.
	ErrNameTaken = errors.New("auth: token name taken")
	// ErrNotFound is returned by Revoke for an unknown name.
	ErrNotFound = errors.New("auth: no token of that name")
)

// Token is what the store knows of a token; never its secret.
type Token struct {
	// Name identifies the token to people, unique in the store.
	Name string `json:"name"`
	// Scopes are the permissions the token carries.
	Scopes    []Scope   `json:"scopes"`
	CreatedAt time.Time `json:"created_at"`
	// LastUsed is the latest recorded use, within LastUsedResolution;
	// nil when never used. It is best effort: a failed write of it does
	// not fail the request that used the token.
	LastUsed *time.Time `json:"last_used,omitempty"`
	// Version orders the changes of the token in the config log: the
	// time it was stored, in Unix milliseconds. Tokens stored before
	// versions existed have 0.
	Version int64 `json:"version,omitempty"`
}

// Allows reports whether the token carries scope s, directly or through
// ScopeAdmin.
func (t Token) Allows(s Scope) bool {
	return slices.Contains(t.Scopes, s) || slices.Contains(t.Scopes, ScopeAdmin)
}

// Generate returns a new token: TokenPrefix and the unpadded base64url of
// 32 bytes from crypto/rand.
func Generate() string {
	var b [tokenBytes]byte
	// crypto/rand.Read never returns an error: it ends the program
	// instead, which is right for a broken random source.
	_, _ = rand.Read(b[:])
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// DefaultPrefix starts every key when Config.Prefix is empty.
const DefaultPrefix = keyspace.DefaultPrefix

// Config holds the Store's tunables. The zero value means defaults.
type Config struct {
	// Prefix starts every key the Store uses (their layout is
	// internal/keyspace's), so several keyhook installations can share
	// one Redis. It must not contain '{' or '}', which would move the
	// Redis Cluster hash tag. Default "keyhook".
	Prefix string
	// Log, when not nil, records every token change before it is made in
	// Redis (a configlog.Log), so that a Redis that loses data can be
	// rebuilt from it and never brings a revoked token back; a change it
	// refuses fails and leaves Redis unchanged. Default nil: Redis only.
	Log ConfigLog
}

// Validate reports the first invalid field of c. Zero fields are valid:
// they mean the default.
func (c Config) Validate() error {
	if err := (keyspace.Keyspace{Prefix: c.Prefix}).Validate(); err != nil {
		return fmt.Errorf("auth: config: Prefix: %w", err)
	}
	return nil
}

// Store keeps tokens in Redis: three HASHes that share one hash tag (the
// records by token hash, the names, the last uses), changed together by
// the scripts of scripts.go. It is safe for concurrent use; many Stores,
// in many processes, may share one Redis and prefix.
type Store struct {
	rdb  redis.UniversalClient
	keys keyspace.Keyspace
	log  ConfigLog
	now  func() time.Time

	mu sync.Mutex
	// recorded holds, per token hash, when this Store last wrote its
	// use; entries exist only for tokens that authenticated, so the map
	// is bounded by the number of tokens.
	recorded map[string]time.Time
}

// New returns a Store over rdb, which the caller keeps ownership of. It
// returns an error naming the bad field when cfg is invalid.
func New(rdb redis.UniversalClient, cfg Config) (*Store, error) {
	if rdb == nil {
		return nil, errors.New("auth: new: nil redis client")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Store{rdb: rdb, keys: keyspace.Keyspace{Prefix: cfg.Prefix}, log: cfg.Log, now: time.Now, recorded: make(map[string]time.Time)}, nil
}

// hashSecret is the stored identity of a token: its SHA-256, in hex. A
// token carries 256 random bits, so a plain hash, unsalted and fast, is
// as strong as the token and lets a lookup find it.
func hashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// Create generates a token named name with the given scopes, stores its
// hash and returns the token, which is not stored and cannot be shown
// again, with its record. The name must be 1 to MaxNameLength characters
// of [A-Za-z0-9._-] and not taken (else an error wrapping ErrNameTaken);
// scopes must be known and at least one.
func (s *Store) Create(ctx context.Context, name string, scopes []Scope) (string, Token, error) {
	tok, err := s.newRecord(name, scopes)
	if err != nil {
		return "", Token{}, fmt.Errorf("auth: create: %w", err)
	}
	data, err := json.Marshal(tok)
	if err != nil {
		return "", Token{}, fmt.Errorf("auth: create: encode: %w", err)
	}
	secret := Generate()
	h := hashSecret(secret)
	if s.log != nil {
		// A taken name is refused before the log records a token that
		// Redis would refuse.
		taken, err := s.rdb.HExists(ctx, s.keys.TokenNames(), name).Result()
		if err != nil {
			return "", Token{}, fmt.Errorf("auth: create: %w", err)
		}
		if taken {
			return "", Token{}, fmt.Errorf("auth: create %q: %w", name, ErrNameTaken)
		}
		if err := s.logPut(ctx, h, tok.Version, data); err != nil {
			return "", Token{}, fmt.Errorf("auth: create: %w", err)
		}
	}
	res, err := createScript.Run(ctx, s.rdb, []string{s.keys.Tokens(), s.keys.TokenNames()}, h, name, data).Int()
	if err != nil {
		return "", Token{}, fmt.Errorf("auth: create: %w", err)
	}
	if res != 1 && s.log != nil {
		// The name was taken between the check and the script: the
		// token the log recorded never existed.
		s.logUndo(ctx, h, tok.Version)
	}
	switch res {
	case 1:
		return secret, tok, nil
	case 0:
		return "", Token{}, fmt.Errorf("auth: create %q: %w", name, ErrNameTaken)
	default:
		// 256 random bits collided: the random source is broken.
		return "", Token{}, errors.New("auth: create: generated token already exists")
	}
}

// Ensure makes secret a stored token named name with the given scopes: it
// is how an operator-provided token (the bootstrap token) comes to exist.
// It is idempotent: when name already refers to secret, nothing changes
// (its scopes included) and created is false. When name referred to
// another token, that token is revoked and replaced, so changing the
// configured secret rotates it. A secret stored under another name is an
// error. secret must be MinSecretLength to MaxSecretLength printable ASCII
// characters without spaces.
func (s *Store) Ensure(ctx context.Context, name, secret string, scopes []Scope) (created bool, err error) {
	if msg := secretProblem(secret); msg != "" {
		return false, fmt.Errorf("auth: ensure %q: token %s", name, msg)
	}
	tok, err := s.newRecord(name, scopes)
	if err != nil {
		return false, fmt.Errorf("auth: ensure: %w", err)
	}
	data, err := json.Marshal(tok)
	if err != nil {
		return false, fmt.Errorf("auth: ensure: encode: %w", err)
	}
	h := hashSecret(secret)
	if s.log != nil {
		done, err := s.logEnsure(ctx, name, h, tok, data)
		if err != nil || done {
			return false, err
		}
	}
	res, err := ensureScript.Run(ctx, s.rdb, []string{s.keys.Tokens(), s.keys.TokenNames(), s.keys.TokenLastUsed()},
		h, name, data).Int()
	if err != nil {
		return false, fmt.Errorf("auth: ensure %q: %w", name, err)
	}
	switch res {
	case 0:
		return false, nil
	case 1, 2:
		return true, nil
	default:
		return false, fmt.Errorf("auth: ensure %q: the token is already stored under another name", name)
	}
}

// Authenticate returns the record of the token secret, or an error
// wrapping ErrInvalidToken when it is not stored. Other errors mean the
// store could not answer (Redis unreachable) and say nothing about the
// token. The lookup is by hash, so its timing tells nothing about how
// close a guess came. It records the use (best effort, at most every
// LastUsedResolution per token and Store).
func (s *Store) Authenticate(ctx context.Context, secret string) (Token, error) {
	if secret == "" || len(secret) > MaxSecretLength {
		return Token{}, ErrInvalidToken
	}
	h := hashSecret(secret)
	data, err := s.rdb.HGet(ctx, s.keys.Tokens(), h).Bytes()
	if errors.Is(err, redis.Nil) {
		return Token{}, ErrInvalidToken
	}
	if err != nil {
		return Token{}, fmt.Errorf("auth: authenticate: %w", err)
	}
	var tok Token
	if err := json.Unmarshal(data, &tok); err != nil {
		return Token{}, fmt.Errorf("auth: authenticate: decode token record: %w", err)
	}
	s.recordUse(ctx, h)
	return tok, nil
}

// recordUse writes the token's last use if this Store has not done so
// within LastUsedResolution. Errors are ignored: the timestamp is
// informational and must not turn a valid request into a failure.
func (s *Store) recordUse(ctx context.Context, h string) {
	now := s.now()
	s.mu.Lock()
	last, ok := s.recorded[h]
	due := !ok || now.Sub(last) >= LastUsedResolution
	if due {
		s.recorded[h] = now
	}
	s.mu.Unlock()
	if due {
		_ = s.rdb.HSet(ctx, s.keys.TokenLastUsed(), h, now.UnixMilli()).Err()
	}
}

// List returns every stored token's record, sorted by name.
func (s *Store) List(ctx context.Context) ([]Token, error) {
	all, err := s.rdb.HGetAll(ctx, s.keys.Tokens()).Result()
	if err != nil {
		return nil, fmt.Errorf("auth: list: %w", err)
	}
	used, err := s.rdb.HGetAll(ctx, s.keys.TokenLastUsed()).Result()
	if err != nil {
		return nil, fmt.Errorf("auth: list: %w", err)
	}
	out := make([]Token, 0, len(all))
	for h, data := range all {
		var tok Token
		if err := json.Unmarshal([]byte(data), &tok); err != nil {
			return nil, fmt.Errorf("auth: list: decode token record: %w", err)
		}
		if ms, err := strconv.ParseInt(used[h], 10, 64); err == nil {
			t := time.UnixMilli(ms).UTC()
			tok.LastUsed = &t
		}
		out = append(out, tok)
	}
	slices.SortFunc(out, func(a, b Token) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// Revoke removes the token named name: it stops authenticating at once,
// on every node. An unknown name gives an error wrapping ErrNotFound.
func (s *Store) Revoke(ctx context.Context, name string) error {
	if s.log != nil {
		if err := s.logRevoke(ctx, name); err != nil {
			return err
		}
	}
	res, err := revokeScript.Run(ctx, s.rdb, []string{s.keys.Tokens(), s.keys.TokenNames(), s.keys.TokenLastUsed()}, name).Int()
	if err != nil {
		return fmt.Errorf("auth: revoke %q: %w", name, err)
	}
	if res == 0 {
		return fmt.Errorf("auth: revoke %q: %w", name, ErrNotFound)
	}
	return nil
}

// newRecord validates name and scopes and returns a new token record.
func (s *Store) newRecord(name string, scopes []Scope) (Token, error) {
	if msg := nameProblem(name); msg != "" {
		return Token{}, fmt.Errorf("token name %q %s", name, msg)
	}
	if len(scopes) == 0 {
		return Token{}, fmt.Errorf("token %q has no scope; known: %s", name, knownList())
	}
	for _, sc := range scopes {
		if !sc.Known() {
			return Token{}, fmt.Errorf("token %q: unknown scope %q; known: %s", name, sc, knownList())
		}
	}
	now := s.now().UTC().Truncate(time.Millisecond)
	return Token{Name: name, Scopes: normalizeScopes(scopes), CreatedAt: now, Version: now.UnixMilli()}, nil
}

func nameProblem(name string) string {
	if name == "" || len(name) > MaxNameLength {
		return fmt.Sprintf("must be 1 to %d characters", MaxNameLength)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return "may contain only ASCII letters, digits, '.', '_' and '-'"
		}
	}
	return ""
}

// secretProblem says what makes an operator-provided secret unusable, or
// "" if it is usable. It never repeats the secret.
func secretProblem(secret string) string {
	if len(secret) < MinSecretLength || len(secret) > MaxSecretLength {
		return fmt.Sprintf("must be %d to %d characters long", MinSecretLength, MaxSecretLength)
	}
	for i := 0; i < len(secret); i++ {
		if c := secret[i]; c <= ' ' || c > '~' {
			return "must be printable ASCII without spaces"
		}
	}
	return ""
}
