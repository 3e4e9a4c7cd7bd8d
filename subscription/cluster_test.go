package subscription

import (
	"context"
	"testing"

	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/redis/go-redis/v9"
)

// Every script of the store, the idempotent create with its two keys
// above all, runs on a Redis Cluster: keyspace gives the keys one slot.
func TestStoreScriptsRunOnRedisCluster(t *testing.T) {
	cluster := testutil.StartRedisCluster(t, 3)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	store := newStore(t, rdb, Config{})

	plain := newSub()
	if err := store.Create(ctx, plain); err != nil {
		t.Fatalf("Create: %v", err)
	}
	first := newSub()
	if _, err := store.CreateIdempotent(ctx, first, idem("ops", "k", "fp")); err != nil {
		t.Fatalf("CreateIdempotent: %v", err)
	}
	again := newSub()
	if replayed, err := store.CreateIdempotent(ctx, again, idem("ops", "k", "fp")); err != nil || !replayed || again.ID != first.ID {
		t.Fatalf("replay = %s, %v, %v; want a replay of %s", again.ID, replayed, err, first.ID)
	}
	if _, err := store.Update(ctx, first.ID, 1, func(s *Subscription) error { s.Name = "renamed"; return nil }); err != nil {
		t.Fatalf("Update: %v", err)
	}
	if err := store.DeleteVersion(ctx, first.ID, 2); err != nil {
		t.Fatalf("DeleteVersion: %v", err)
	}
	if err := store.Delete(ctx, plain.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
}
