package keyspace

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// DefaultPrefix starts every key when Keyspace.Prefix is empty.
const DefaultPrefix = "keyhook"

// Keyspace builds the names of keyhook's Redis keys and channels. The
// zero value is the default keyspace. Every key starts with the prefix, so
// several keyhook installations can share one Redis.
type Keyspace struct {
	// Prefix starts every key and channel. It must not contain '{' or
	// '}', which would move the hash tags below. Default "keyhook".
	Prefix string
}

// ErrInvalidPrefix is wrapped by Validate's error.
var ErrInvalidPrefix = errors.New("keyspace: invalid prefix")

// Validate reports whether the prefix keeps the key layout intact.
func (k Keyspace) Validate() error {
	if strings.ContainsAny(k.Prefix, "{}") {
		return fmt.Errorf("%w: %q must not contain '{' or '}'", ErrInvalidPrefix, k.Prefix)
	}
	return nil
}

func (k Keyspace) prefix() string {
	if k.Prefix == "" {
		return DefaultPrefix
	}
	return k.Prefix
}

// Partition tracking (package tracking).

// Partition is the HASH holding one partition's tracking state (its fields
// are tracking's):
//
//	<prefix>:track:{<subscription>:<topic>:<partition>}
//
// The tag is the partition itself: every script touches one partition's
// key only, and partitions spread over the cluster. The caller keeps
// braces out of subscription and topic, and colons out of topic, so that
// ParsePartition can invert the name.
func (k Keyspace) Partition(subscription, topic string, partition int32) string {
	return k.prefix() + ":track:{" + subscription + ":" + topic + ":" +
		strconv.FormatInt(int64(partition), 10) + "}"
}

// PartitionPattern is the SCAN MATCH pattern of the Partition keys of one
// subscription, with glob characters in the prefix and id escaped. It
// also matches subscriptions whose id extends this one across a colon
// ("a" matches "a:b"), so callers check each key with ParsePartition.
func (k Keyspace) PartitionPattern(subscription string) string {
	return GlobEscape(k.prefix()+":track:{"+subscription+":") + "*"
}

// ParsePartition inverts Partition. Topics and partitions never contain a
// colon, so the subscription is everything before the last two. ok is
// false for any key Partition would not build exactly.
func (k Keyspace) ParsePartition(key string) (subscription, topic string, partition int32, ok bool) {
	inner, ok := strings.CutPrefix(key, k.prefix()+":track:{")
	if !ok {
		return "", "", 0, false
	}
	inner, ok = strings.CutSuffix(inner, "}")
	if !ok {
		return "", "", 0, false
	}
	rest, part, ok := cutLast(inner, ":")
	if !ok {
		return "", "", 0, false
	}
	sub, topic, ok := cutLast(rest, ":")
	if !ok {
		return "", "", 0, false
	}
	p, err := strconv.ParseInt(part, 10, 32)
	if err != nil || k.Partition(sub, topic, int32(p)) != key {
		return "", "", 0, false
	}
	return sub, topic, int32(p), true
}

// Redrives (package deadletter).

// RedriveQueue is the LIST of redriven dead letters of one source
// partition, waiting for the partition's owner to send them:
//
//	<prefix>:redrive:{<subscription>}:<topic>:<partition>
//
// The tag is the subscription, so that a subscription's queues and their
// RedriveIndex change together in one transaction.
func (k Keyspace) RedriveQueue(subscription, topic string, partition int32) string {
	return k.prefix() + ":redrive:{" + subscription + "}:" + topic + ":" +
		strconv.FormatInt(int64(partition), 10)
}

// RedriveIndex is the SET of the source partitions ("<topic>:<partition>")
// of one subscription whose RedriveQueue is not empty, so that owners
// and deletes find them without a scan:
//
//	<prefix>:redrive:{<subscription>}
func (k Keyspace) RedriveIndex(subscription string) string {
	return k.prefix() + ":redrive:{" + subscription + "}"
}

// Endpoint health (package monitor).

// RedrivesQueued is the STRING counting the redrives ever queued, on any
// subscription: one GET tells the node-wide redrive poll whether it must
// list the queues again, so that an idle node does not list them all
// every interval:
//
//	<prefix>:redrives:queued
//
// No tag: it is written after a push, alone. It is apart from the
// "<prefix>:redrive:" keys, which are each subscription's.
func (k Keyspace) RedrivesQueued() string {
	return k.prefix() + ":redrives:queued"
}

// FailingStreak is the HASH of one subscription's failing streak, shared
// by every node: "since" is the first failure (Unix milliseconds) after
// the last success, absent when the endpoint is not failing; "ok" is the
// last success, or the last resume, that ended a streak:
//
//	<prefix>:streak:{<subscription>}
func (k Keyspace) FailingStreak(subscription string) string {
	return k.prefix() + ":streak:{" + subscription + "}"
}

// DeadLetterWindow is the counter (a STRING, with a TTL) of the dead
// letters one subscription wrote in the window that starts at start (Unix
// seconds), summed over every node:
//
//	<prefix>:dlwindow:{<subscription>}:<start>
func (k Keyspace) DeadLetterWindow(subscription string, start int64) string {
	return k.prefix() + ":dlwindow:{" + subscription + "}:" + strconv.FormatInt(start, 10)
}

// Delivery log (package deliverylog).

// DeliveryAttempts is the LIST of one delivery's attempts, oldest first,
// each a JSON object, expiring with the log's retention:
//
//	<prefix>:dlog:{<subscription>}:<delivery id>
//
// It shares its tag with DeliveryRecent and DeliveryFailed, so that the
// script that writes a subscription's batch and evicts its oldest
// deliveries runs on one slot.
func (k Keyspace) DeliveryAttempts(subscription, deliveryID string) string {
	return k.DeliveryAttemptsPrefix(subscription) + deliveryID
}

// DeliveryAttemptsPrefix is DeliveryAttempts without the delivery id, for
// the script that builds the names of the deliveries it evicts.
func (k Keyspace) DeliveryAttemptsPrefix(subscription string) string {
	return k.prefix() + ":dlog:{" + subscription + "}:"
}

// DeliveryRecent is the ZSET of one subscription's logged deliveries,
// scored by their latest attempt (Unix milliseconds); its size is the
// log's cap per subscription:
//
//	<prefix>:dlog:{<subscription>}
func (k Keyspace) DeliveryRecent(subscription string) string {
	return k.prefix() + ":dlog:{" + subscription + "}"
}

// DeliveryFailed is the ZSET of the logged deliveries of one subscription
// with a failed attempt, scored by their latest failure (Unix
// milliseconds), a subset of DeliveryRecent:
//
//	<prefix>:dlogfailed:{<subscription>}
func (k Keyspace) DeliveryFailed(subscription string) string {
	return k.prefix() + ":dlogfailed:{" + subscription + "}"
}

// Cleanups (package control).

// Cleanups is the ZSET of deleted subscriptions whose state (tracking,
// consumer group, redrives) is still to be removed, scored by when the
// next attempt is due (Unix milliseconds):
//
//	<prefix>:cleanups
func (k Keyspace) Cleanups() string {
	return k.prefix() + ":cleanups"
}

// Subscriptions (package subscription).

// Subscriptions is the HASH from subscription id to the subscription's
// JSON:
//
//	<prefix>:subscriptions
//
// The whole set is one key, so every change to it is a single-key
// operation. It has no braces: its tag is its whole name, which the
// idempotency records name as their tag to share its slot.
func (k Keyspace) Subscriptions() string {
	return k.prefix() + ":subscriptions"
}

// SubscriptionsChanged is the Pub/Sub channel carrying the id of every
// subscription created, changed or deleted:
//
//	<prefix>:subscriptions:changed
//
// A channel is not a key and has no slot; PUBLISH reaches every
// subscriber on a cluster.
func (k Keyspace) SubscriptionsChanged() string {
	return k.Subscriptions() + ":changed"
}

// Idempotency is the STRING recording a create made with an
// Idempotency-Key, for 24 hours (its TTL is the subscription store's):
//
//	{<prefix>:subscriptions}:idempotency:<sha256(caller)>:<sha256(key)>
//
// The tag is the Subscriptions key's name, so the script that stores a
// subscription and its record touches one slot. caller scopes the key:
// the same client key from two callers names two records. Both are
// hashed: they are client text, of any bytes, and must not shape the key
// space. (Before keys were scoped, the record was
// "{<prefix>:subscriptions}:idempotency:<sha256(key)>"; such records are
// no longer read and expire within a day.)
func (k Keyspace) Idempotency(caller, key string) string {
	return "{" + k.Subscriptions() + "}:idempotency:" + hash(caller) + ":" + hash(key)
}

// SubscriptionDeleted is the STRING marking, for a minute, that a
// subscription was deleted:
//
//	<prefix>:{<prefix>:subscriptions}:deleted:<id>
//
// A change that finds the subscription gone tells by it a delete from a
// Redis that lost data. The tag is the Subscriptions key's name, so the
// delete scripts touch one slot; the name starts with the prefix, so an
// ACL user limited to "<prefix>:*" may write it.
func (k Keyspace) SubscriptionDeleted(id string) string {
	return k.prefix() + ":{" + k.Subscriptions() + "}:deleted:" + id
}

// SubscriptionsVersion is the STRING counting the changes to the
// subscription set: every script that changes the set increments it, so
// one GET tells a watcher whether the set changed since it last read it:
//
//	<prefix>:{<prefix>:subscriptions}:version
//
// The tag is the Subscriptions key's name, so the scripts touch one slot.
func (k Keyspace) SubscriptionsVersion() string {
	return k.prefix() + ":{" + k.Subscriptions() + "}:version"
}

// API tokens (package auth).

// Tokens is the HASH from a token's hash to its record's JSON:
//
//	<prefix>:{tokens}
//
// The token keys share the {tokens} tag: the scripts that create, rotate
// and revoke a token change all three at once.
func (k Keyspace) Tokens() string {
	return k.prefix() + ":{tokens}"
}

// TokenNames is the HASH from a token's name to its hash; names are
// unique:
//
//	<prefix>:{tokens}:names
func (k Keyspace) TokenNames() string {
	return k.Tokens() + ":names"
}

// TokenLastUsed is the HASH from a token's hash to the unix milliseconds
// of its last recorded use, apart from Tokens so that recording a use
// never rewrites a token:
//
//	<prefix>:{tokens}:last_used
func (k Keyspace) TokenLastUsed() string {
	return k.Tokens() + ":last_used"
}

// Rate limits (package ratelimit).

// RateLimit is the STRING holding a subscription's rate limit state, the
// theoretical arrival time of its next request (GCRA, in microseconds of
// the Redis clock), expiring once the limit is full again:
//
//	<prefix>:ratelimit:{<subscription>}
func (k Keyspace) RateLimit(subscription string) string {
	return k.prefix() + ":ratelimit:{" + subscription + "}"
}

// Node registry (package nodes).

// Nodes is the HASH from node id to the node's last heartbeat (JSON):
//
//	<prefix>:nodes
//
// No tag: scripts touch this key alone.
func (k Keyspace) Nodes() string {
	return k.prefix() + ":nodes"
}

// GroupMember is the STRING holding the member id a node last joined a
// consumer group as, so that the node restarted after a crash can remove
// that member at once (package nodes, Members):
//
//	<prefix>:member:<node>:<group>
//
// No tag: it is read and written alone.
func (k Keyspace) GroupMember(node, group string) string {
	return k.prefix() + ":member:" + node + ":" + group
}

// GlobEscape escapes the characters SCAN MATCH treats as a glob, so that
// s matches only itself.
func GlobEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// hash is the hex SHA-256 of s.
func hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}
