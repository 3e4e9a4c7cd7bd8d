package testutil

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestRedisRestartFromSnapshotForgetsLaterWrites defends what the Redis
// rollback fault test relies on: after RestartFromSnapshot the server is
// back on the same address with the data of the snapshot, and only that.
func TestRedisRestartFromSnapshotForgetsLaterWrites(t *testing.T) {
	r := StartRedis(t)
	c := r.Client()
	ctx := context.Background()
	addr := r.Addr

	if err := c.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	snap := r.Snapshot()
	if err := c.Set(ctx, "after", "2", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r.RestartFromSnapshot(snap)

	if r.Addr != addr {
		t.Errorf("restarted on %s, want %s", r.Addr, addr)
	}
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatalf("KEYS after the restart: %v", err)
	}
	if diff := cmp.Diff([]string{"before"}, keys); diff != "" {
		t.Errorf("keys after restoring the snapshot (-want +got):\n%s", diff)
	}
}
