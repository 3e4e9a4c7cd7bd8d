package tracking

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
)

func TestConfigValidateNamesTheBadField(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string // substring; "" means valid
	}{
		{"zero value means defaults", Config{}, ""},
		{"custom values", Config{Prefix: "kh:prod", StaleClaim: time.Second}, ""},
		{"brace in prefix", Config{Prefix: "kh{x}"}, "Prefix"},
		{"negative stale limit", Config{StaleClaim: -time.Second}, "StaleClaim"},
		{"stale limit under a millisecond", Config{StaleClaim: time.Microsecond}, "StaleClaim"},
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
	s, err := New(rdb, Config{})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if diff := cmp.Diff([]any{"keyhook:track:{s:t:0}", DefaultStaleClaim.Milliseconds()}, []any{s.keys.Partition("s", "t", 0), s.staleMS}); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	if _, err := New(nil, Config{}); err == nil {
		t.Errorf("New(nil) succeeded; want an error")
	}
	if _, err := New(rdb, Config{StaleClaim: -1}); err == nil {
		t.Errorf("New with a negative StaleClaim succeeded; want an error")
	}
}
