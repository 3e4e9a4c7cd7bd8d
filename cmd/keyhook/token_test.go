package main

import (
	"flag"
	"io"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keyhook/keyhook/connect"
)

// The token command and serve read the same Redis connection from the
// same flags: one declaration, named by redisFlags.
func TestTokenAndServeShareTheRedisFlags(t *testing.T) {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	var rc connect.RedisConfig
	parsed := addRedisFlags(fs, &rc)
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	var want []string
	for _, name := range redisFlags {
		want = append(want, name)
	}
	slices.Sort(want)
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("declared flags (-redisFlags +declared):\n%s", diff)
	}

	args := []string{
		"--redis-url", "rediss://redis:6379/0", "--redis-tls-ca-file", "/ca", "--redis-tls-cert-file", "/crt",
		"--redis-tls-key-file", "/key", "--redis-sentinel-master", "main", "--redis-addrs", "s1:26379,s2:26379",
	}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	parsed()
	serve, err := parseConfig("serve", append([]string{"--kafka-brokers", "k:9092"}, args...), func(string) string { return "" }, io.Discard, true)
	if err != nil {
		t.Fatalf("parseConfig: %v", err)
	}
	wantRC := connect.RedisConfig{URL: "rediss://redis:6379/0", TLSCAFile: "/ca", TLSCertFile: "/crt", TLSKeyFile: "/key",
		SentinelMaster: "main", Addrs: []string{"s1:26379", "s2:26379"}}
	if diff := cmp.Diff(wantRC, rc); diff != "" {
		t.Errorf("token's Redis connection (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantRC, serve.Redis); diff != "" {
		t.Errorf("serve's Redis connection (-want +got):\n%s", diff)
	}
}
