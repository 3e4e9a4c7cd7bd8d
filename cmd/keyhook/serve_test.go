package main

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/keyhook/keyhook/internal/testutil"
)

// TestServeNamesTheFlagOfAFailedBuild: an error that only shows when the
// node is built (the API's port is taken) still names the flag and its
// variable, as every config error does.
func TestServeNamesTheFlagOfAFailedBuild(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	brokers := testutil.Kfake(t, 1, "orders")
	redisURL := testutil.StartRedis(t).URL()
	args := []string{"serve", "--kafka-brokers", brokers[0], "--redis-url", redisURL,
		"--http-addr", ln.Addr().String(), "--log-level", "error"}
	err = run(context.Background(), args, noEnv, io.Discard, io.Discard)
	if want := "--http-addr (KEYHOOK_HTTP_ADDR)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("serve on a taken port = %v, want an error naming %s", err, want)
	}
}
