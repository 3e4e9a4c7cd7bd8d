package subscription

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// newStore returns a Store over rdb with cfg, failing the test on error.
func newStore(t *testing.T, rdb redis.UniversalClient, cfg Config) *Store {
	t.Helper()
	s, err := New(rdb, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func TestConfigValidateNamesTheBadField(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string // substring; "" means valid
	}{
		{"zero value means defaults", Config{}, ""},
		{"custom values", Config{Prefix: "kh:prod", IdempotencyTTL: time.Hour}, ""},
		{"brace in prefix", Config{Prefix: "kh{x}"}, "Prefix"},
		{"negative TTL", Config{IdempotencyTTL: -time.Second}, "IdempotencyTTL"},
		{"TTL under a millisecond", Config{IdempotencyTTL: time.Microsecond}, "IdempotencyTTL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v; want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Validate() = %v; want an error naming %s", err, tt.wantErr)
			}
		})
	}
}

func TestNewAppliesDefaultsAndRefusesBadInput(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { _ = rdb.Close() })
	s := newStore(t, rdb, Config{})
	if s.idempotencyTTL != DefaultIdempotencyTTL || s.keys.Subscriptions() != "keyhook:subscriptions" {
		t.Errorf("defaults: TTL %v, hash %q; want %v, keyhook:subscriptions", s.idempotencyTTL, s.keys.Subscriptions(), DefaultIdempotencyTTL)
	}
	if _, err := New(nil, Config{}); err == nil {
		t.Errorf("New(nil) succeeded; want an error")
	}
	if _, err := New(rdb, Config{Prefix: "{"}); err == nil {
		t.Errorf("New with a brace in Prefix succeeded; want an error")
	}
}
