package testutil

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisCluster is a real Redis Cluster of primaries only, each a
// redis-server on a free loopback port, owned by one test.
type RedisCluster struct {
	// Addrs are the nodes' addresses; each owns a share of the slots.
	Addrs []string
}

// StartRedisCluster starts nodes redis-server processes with cluster mode
// on, joins them with redis-cli --cluster create (no replicas), waits until
// every node reports cluster_state:ok, and stops them when the test ends.
// Redis needs at least three primaries for a cluster.
func StartRedisCluster(t testing.TB, nodes int) *RedisCluster {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redis-cli not found in PATH (it comes with redis-server: apt-get install -y redis-server): %v", err)
	}
	c := &RedisCluster{}
	for range nodes {
		c.Addrs = append(c.Addrs, startRedisServer(t, func(port int) []string {
			return []string{
				"--port", strconv.Itoa(port), "--cluster-enabled", "yes",
				"--cluster-config-file", "nodes-" + strconv.Itoa(port) + ".conf",
				"--cluster-node-timeout", "5000",
			}
		}))
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("testutil: redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, addr := range c.Addrs {
		waitClusterOK(ctx, t, addr)
	}
	return c
}

// waitClusterOK waits until the node at addr has learned the whole slot
// map: the create command returns before every node agrees on it.
func waitClusterOK(ctx context.Context, t testing.TB, addr string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		info, err := rdb.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("testutil: redis cluster node %s not ready: %v %s", addr, err, info)
		case <-tick.C:
		}
	}
}
