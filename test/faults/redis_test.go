package faults

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Redis restarts without persistence mid-stream: every partition's tracking
// state is gone. The owners notice, claim again and write what they know;
// nothing is lost, and duplicates are bounded by what Redis lost, the
// records acked above the Kafka commit at the restart.
func TestFaultRedisRestartWithoutPersistence(t *testing.T) {
	const records, rate = 30_000, 1_000
	c := newCluster(t, "redis-restart", clusterConfig{latency: smallLatency})
	c.startNodes()
	prod := c.produce(records, rate)
	sleepFor(10 * time.Second)

	config := c.dumpConfig()
	lost := c.ackedAboveCommit()
	inFlight := c.sink.InFlight()
	restartedAt := time.Now()
	c.redis.Restart(false)
	// The subscription is configuration, not tracking state: put it back at
	// once, as an operator provisioning Redis would, so that the nodes keep
	// their consumers (a node that lists no subscription stops its group,
	// gracefully).
	c.restoreConfig(config)
	c.addBound(lost+inFlight, fmt.Sprintf("Redis restarted empty: %d records acked above the Kafka commit + %d in flight", lost, inFlight))
	t.Logf("  Redis restarted without its data in %v; it lost the acked ranges of %d records above the Kafka commit",
		time.Since(restartedAt).Round(time.Millisecond), lost)

	prod.wait(time.Minute)
	c.finish()
	t.Logf("  node logs: %v", c.logLines("tracking state lost", "subscription removed", "partitions lost", "fenced", "flush failed"))
}

// Redis comes back from an older snapshot: the acked ranges written since
// are gone and epochs go back in time. Owners must carry on without loss,
// duplicates only, and the Kafka commit must never move backwards. A
// graceful node restart between the snapshot and the rollback makes the
// rollback take epochs and owners back too; another one after it makes new
// owners claim over the rolled-back state.
func TestFaultRedisRollback(t *testing.T) {
	const records, rate = 30_000, 1_000
	c := newCluster(t, "redis-rollback", clusterConfig{latency: smallLatency})
	c.startNodes()
	prod := c.produce(records, rate)
	sleepFor(6 * time.Second)
	snapshot := c.redis.Snapshot()
	snappedAt := time.Now()
	// Ownership changes after the snapshot, so that the rollback takes
	// epochs and owners back in time, not only acked ranges.
	c.restartGracefully(c.live()[c.rng.IntN(len(c.live()))])
	sleepFor(4 * time.Second)

	lost := c.ackedAboveCommit()
	inFlight := c.sink.InFlight()
	c.redis.RestartFromSnapshot(snapshot)
	c.addBound(lost+inFlight, fmt.Sprintf("Redis rolled back %v: %d records acked above the Kafka commit + %d in flight",
		time.Since(snappedAt).Round(time.Millisecond), lost, inFlight))

	sleepFor(3 * time.Second)
	c.restartGracefully(c.live()[c.rng.IntN(len(c.live()))])

	prod.wait(time.Minute)
	c.finish()
	t.Logf("  node logs: %v", c.logLines("tracking state lost", "partition claimed", "partitions lost", "fenced", "flush failed", "claim failed"))
}

// dumpConfig serialises (DUMP) every key of the Redis that is not tracking
// state: the subscriptions.
func (c *cluster) dumpConfig() map[string]string {
	c.t.Helper()
	ctx := context.Background()
	keys, err := c.rdb.Keys(ctx, "*").Result()
	if err != nil {
		c.t.Fatalf("redis KEYS: %v", err)
	}
	out := make(map[string]string)
	for _, k := range keys {
		if strings.Contains(k, ":track:{") {
			continue
		}
		v, err := c.rdb.Dump(ctx, k).Result()
		if err != nil {
			c.t.Fatalf("redis DUMP %s: %v", k, err)
		}
		out[k] = v
	}
	if len(out) == 0 {
		c.t.Fatal("redis holds no configuration to keep")
	}
	return out
}

// restoreConfig writes back what dumpConfig saved.
func (c *cluster) restoreConfig(keys map[string]string) {
	c.t.Helper()
	ctx := context.Background()
	for k, v := range keys {
		if err := c.rdb.RestoreReplace(ctx, k, 0, v).Err(); err != nil {
			c.t.Fatalf("redis RESTORE %s: %v", k, err)
		}
	}
}
