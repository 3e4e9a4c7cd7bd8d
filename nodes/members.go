package nodes

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keyhook/keyhook/internal/keyspace"
)

// MemberTTL is how long a remembered member id outlives its last write.
// A process that crashed is removed from its groups by their session
// timeout anyway (seconds); the memory matters only to a restart within
// it, and the running node writes it again well within the TTL.
const MemberTTL = time.Hour

// Members remembers, for one node, the member id it last joined each
// consumer group as. A node restarted after a crash (kill -9, OOM) reads
// it and removes that member before joining again: the coordinator would
// otherwise wait for the dead member's session to time out before giving
// its partitions to anyone, the restarted node included. Safe for
// concurrent use; it holds no state but the client.
type Members struct {
	rdb  redis.UniversalClient
	ks   keyspace.Keyspace
	node string
}

// NewMembers returns the member memory of node in the keyspace of prefix
// (DefaultPrefix when empty).
func NewMembers(rdb redis.UniversalClient, prefix, node string) (*Members, error) {
	ks := keyspace.Keyspace{Prefix: prefix}
	if err := ks.Validate(); err != nil {
		return nil, err
	}
	if node == "" {
		return nil, errors.New("nodes: members: node is empty")
	}
	return &Members{rdb: rdb, ks: ks, node: node}, nil
}

// Member returns the member id the node last joined group as, "" when
// none is remembered.
func (m *Members) Member(ctx context.Context, group string) (string, error) {
	id, err := m.rdb.Get(ctx, m.ks.GroupMember(m.node, group)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return id, err
}

// Remember records member as the node's member of group for MemberTTL.
func (m *Members) Remember(ctx context.Context, group, member string) error {
	return m.rdb.Set(ctx, m.ks.GroupMember(m.node, group), member, MemberTTL).Err()
}
