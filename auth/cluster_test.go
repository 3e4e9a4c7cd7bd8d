package auth

import (
	"context"
	"testing"

	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/redis/go-redis/v9"
)

// The token scripts touch three keys at once; keyspace gives them one
// slot, so they run on a Redis Cluster.
func TestTokenScriptsRunOnRedisCluster(t *testing.T) {
	cluster := testutil.StartRedisCluster(t, 3)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	store := newStore(t, rdb)

	secret, _, err := store.Create(ctx, "ops", []Scope{ScopeAdmin})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if _, err := store.Authenticate(ctx, secret); err != nil {
		t.Fatalf("Authenticate: %v", err)
	}
	// Ensure with another secret rotates the token: all three keys change.
	if _, err := store.Ensure(ctx, "ops", Generate(), []Scope{ScopeAdmin}); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if err := store.Revoke(ctx, "ops"); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
}
