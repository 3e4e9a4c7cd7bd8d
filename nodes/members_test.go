package nodes_test

import (
	"context"
	"testing"
	"time"

	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/nodes"
)

// A node's member memory keeps one member id per group, apart from every
// other node's and group's, for MemberTTL.
func TestMembersRemembersEachGroupsMemberPerNode(t *testing.T) {
	ctx := context.Background()
	rdb := testutil.StartRedis(t).Client()
	a, err := nodes.NewMembers(rdb, "kh", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := nodes.NewMembers(rdb, "kh", "node-b")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := a.Member(ctx, "g1"); err != nil || got != "" {
		t.Fatalf("member of a group never joined: %q, %v; want none", got, err)
	}
	for _, m := range []struct {
		mem          *nodes.Members
		group, value string
	}{{a, "g1", "a-1"}, {a, "g2", "a-2"}, {b, "g1", "b-1"}} {
		if err := m.mem.Remember(ctx, m.group, m.value); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Remember(ctx, "g1", "a-1-again"); err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct {
		mem         *nodes.Members
		group, want string
	}{{a, "g1", "a-1-again"}, {a, "g2", "a-2"}, {b, "g1", "b-1"}, {b, "g2", ""}} {
		if got, err := m.mem.Member(ctx, m.group); err != nil || got != m.want {
			t.Errorf("member of %s: %q, %v; want %q", m.group, got, err, m.want)
		}
	}
	if ttl := rdb.TTL(ctx, "kh:member:node-a:g1").Val(); ttl <= 0 || ttl > nodes.MemberTTL || ttl < nodes.MemberTTL-time.Minute {
		t.Errorf("the remembered member expires in %v, want %v", ttl, nodes.MemberTTL)
	}
	if _, err := nodes.NewMembers(rdb, "kh", ""); err == nil {
		t.Error("a member memory without a node was accepted")
	}
}
