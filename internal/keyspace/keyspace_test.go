package keyspace

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestKeysKeepTheirNames pins every key byte for byte: a change here
// orphans the data of existing deployments.
func TestKeysKeepTheirNames(t *testing.T) {
	for _, tt := range []struct {
		name string
		ks   Keyspace
		got  func(Keyspace) string
		want string
	}{
		{"partition", Keyspace{}, func(k Keyspace) string { return k.Partition("sub-1", "orders", 3) }, "keyhook:track:{sub-1:orders:3}"},
		{"partition, custom prefix", Keyspace{Prefix: "kh:prod"}, func(k Keyspace) string { return k.Partition("a:b", "t.x", 0) }, "kh:prod:track:{a:b:t.x:0}"},
		{"partition pattern", Keyspace{Prefix: "kh"}, func(k Keyspace) string { return k.PartitionPattern(`s*?[x]\`) }, `kh:track:{s\*\?\[x\]\\:*`},
		{"subscriptions", Keyspace{}, Keyspace.Subscriptions, "keyhook:subscriptions"},
		{"subscriptions, custom prefix", Keyspace{Prefix: "x"}, Keyspace.Subscriptions, "x:subscriptions"},
		{"change feed", Keyspace{}, Keyspace.SubscriptionsChanged, "keyhook:subscriptions:changed"},
		{"idempotency", Keyspace{}, func(k Keyspace) string { return k.Idempotency("ops", "billing-1") },
			"{keyhook:subscriptions}:idempotency:" + hash("ops") + ":" + hash("billing-1")},
		{"deleted subscription", Keyspace{}, func(k Keyspace) string { return k.SubscriptionDeleted("sub_x") }, "keyhook:{keyhook:subscriptions}:deleted:sub_x"},
		{"tokens", Keyspace{}, Keyspace.Tokens, "keyhook:{tokens}"},
		{"token names", Keyspace{}, Keyspace.TokenNames, "keyhook:{tokens}:names"},
		{"token last use", Keyspace{}, Keyspace.TokenLastUsed, "keyhook:{tokens}:last_used"},
		{"redrive queue", Keyspace{}, func(k Keyspace) string { return k.RedriveQueue("sub-1", "orders", 3) }, "keyhook:redrive:{sub-1}:orders:3"},
		{"redrive index", Keyspace{}, func(k Keyspace) string { return k.RedriveIndex("sub-1") }, "keyhook:redrive:{sub-1}"},
		{"cleanups", Keyspace{Prefix: "kh"}, Keyspace.Cleanups, "kh:cleanups"},
		{"failing streak", Keyspace{}, func(k Keyspace) string { return k.FailingStreak("sub-1") }, "keyhook:streak:{sub-1}"},
		{"dead-letter window", Keyspace{}, func(k Keyspace) string { return k.DeadLetterWindow("sub-1", 1700000000) }, "keyhook:dlwindow:{sub-1}:1700000000"},
		{"delivery attempts", Keyspace{}, func(k Keyspace) string { return k.DeliveryAttempts("sub-1", "dlv_ab") }, "keyhook:dlog:{sub-1}:dlv_ab"},
		{"delivery recent", Keyspace{}, func(k Keyspace) string { return k.DeliveryRecent("sub-1") }, "keyhook:dlog:{sub-1}"},
		{"delivery failed", Keyspace{}, func(k Keyspace) string { return k.DeliveryFailed("sub-1") }, "keyhook:dlogfailed:{sub-1}"},
		{"nodes", Keyspace{}, Keyspace.Nodes, "keyhook:nodes"},
		{"rate limit", Keyspace{}, func(k Keyspace) string { return k.RateLimit("sub-1") }, "keyhook:ratelimit:{sub-1}"},
		{"nodes, custom prefix", Keyspace{Prefix: "kh:test"}, Keyspace.Nodes, "kh:test:nodes"},
		{"group member", Keyspace{}, func(k Keyspace) string { return k.GroupMember("node-1", "keyhook-read-0d12") }, "keyhook:member:node-1:keyhook-read-0d12"},
	} {
		if got := tt.got(tt.ks); got != tt.want {
			t.Errorf("%s = %q; want %q", tt.name, got, tt.want)
		}
	}
}

// tag is the part of key Redis Cluster hashes to pick its slot.
func tag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

func TestKeysTouchedTogetherShareASlot(t *testing.T) {
	k := Keyspace{Prefix: "kh"}
	for _, group := range [][]string{
		{k.Subscriptions(), k.Idempotency("ops", "k1"), k.Idempotency("ci", "k2"), k.SubscriptionDeleted("sub_x"), k.SubscriptionsVersion()},
		{k.Tokens(), k.TokenNames(), k.TokenLastUsed()},
		{k.RedriveIndex("s"), k.RedriveQueue("s", "t", 0), k.RedriveQueue("s", "u", 7)},
		{k.DeliveryRecent("s"), k.DeliveryFailed("s"), k.DeliveryAttempts("s", "dlv_1"), k.DeliveryAttemptsPrefix("s") + "dlv_2"},
	} {
		for _, key := range group[1:] {
			if tag(key) != tag(group[0]) {
				t.Errorf("%q hashes %q, %q hashes %q; want one slot", key, tag(key), group[0], tag(group[0]))
			}
		}
	}
	if a, b := tag(k.Partition("s", "t", 0)), tag(k.Partition("s", "t", 1)); a == b {
		t.Errorf("two partitions share the tag %q; want them spread", a)
	}
}

func TestIdempotencyKeysAreScopedToTheCaller(t *testing.T) {
	k := Keyspace{}
	if a, b := k.Idempotency("ops", "key"), k.Idempotency("ci", "key"); a == b {
		t.Errorf("two callers' records share the key %q", a)
	}
	// Hashing each part keeps a colon in the caller from colliding.
	if a, b := k.Idempotency("a:b", "c"), k.Idempotency("a", "b:c"); a == b {
		t.Errorf("(a:b, c) and (a, b:c) share the key %q", a)
	}
}

func TestParsePartitionInvertsPartition(t *testing.T) {
	type part struct {
		Sub, Topic string
		Partition  int32
	}
	k := Keyspace{}
	for _, p := range []part{{"sub-1", "orders", 3}, {"a:b", "t.x", 0}, {"s*", "t", 2147483647}} {
		key := k.Partition(p.Sub, p.Topic, p.Partition)
		sub, topic, partition, ok := k.ParsePartition(key)
		if !ok {
			t.Fatalf("ParsePartition(%q) failed", key)
		}
		if diff := cmp.Diff(p, part{sub, topic, partition}); diff != "" {
			t.Errorf("ParsePartition(%q) (-want +got):\n%s", key, diff)
		}
	}
	for _, key := range []string{
		"other:track:{s:t:1}", "keyhook:track:{s:t:x}", "keyhook:track:{t:1}",
		"keyhook:track:{s:t:01}", "keyhook:track:{s:t:+1}", "keyhook:track:{s:t:1}x",
		"keyhook:track:{s:t:1", "keyhook:track:{s:t:99999999999}",
	} {
		if sub, topic, p, ok := k.ParsePartition(key); ok {
			t.Errorf("ParsePartition(%q) = %q %q %d; want failure", key, sub, topic, p)
		}
	}
}

func TestValidateRefusesBracesInThePrefix(t *testing.T) {
	for _, tt := range []struct {
		prefix string
		ok     bool
	}{{"", true}, {"kh:prod", true}, {"kh{x}", false}, {"}", false}} {
		err := Keyspace{Prefix: tt.prefix}.Validate()
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrInvalidPrefix)) {
			t.Errorf("Validate(%q) = %v; want ok %v", tt.prefix, err, tt.ok)
		}
	}
}
