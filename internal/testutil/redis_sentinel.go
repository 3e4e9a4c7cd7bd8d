package testutil

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// StartRedisSentinel starts one Redis Sentinel on a free loopback port,
// watching the primary at primaryAddr under the name master (quorum 1),
// and stops it when the test ends. It returns the Sentinel's address.
func StartRedisSentinel(t testing.TB, master, primaryAddr string) string {
	t.Helper()
	host, port, err := net.SplitHostPort(primaryAddr)
	if err != nil {
		t.Fatalf("testutil: sentinel: primary address %q: %v", primaryAddr, err)
	}
	// Sentinel rewrites its configuration file as it learns the topology,
	// so it gets a file of its own rather than command-line settings only.
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, "sentinel monitor %s %s %s 1\n", master, host, port), 0o600); err != nil {
		t.Fatalf("testutil: sentinel: %v", err)
	}
	return startRedisServerConf(t, conf, func(p int) []string {
		return []string{"--sentinel", "--port", strconv.Itoa(p)}
	})
}
