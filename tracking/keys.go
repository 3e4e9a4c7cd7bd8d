package tracking

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Fields of a partition's tracking HASH. Counts and offsets are decimal
// strings; times are unix milliseconds taken from the Redis server's clock,
// so nodes with skewed clocks agree on them.
const (
	fieldEpoch     = "epoch"     // owner epoch, raised by every claim
	fieldGen       = "gen"       // Kafka group generation of the owner
	fieldOwner     = "owner"     // owner node id; "" after a release
	fieldAcked     = "acked"     // offsets.Set binary encoding
	fieldWatermark = "watermark" // lowest offset not acked
	fieldFetched   = "fetched"   // next offset to fetch
	fieldCommitted = "committed" // mirror of the last Kafka commit, -1 none
	fieldPending   = "pending"   // fetched at/above the watermark, not acked
	fieldInFlight  = "inflight"  // dispatched to the endpoint right now
	fieldKeys      = "keys"      // keys with a record in flight or queued
	fieldOldest    = "oldest"    // dispatch time of the oldest pending record, 0 none
	fieldClaimed   = "claimed"   // when the current owner claimed
	fieldUpdated   = "updated"   // last claim, flush or release
)

// partitionKey returns the key of pk's tracking HASH:
//
//	<prefix>:track:{<subscription>:<topic>:<partition>}
//
// The braces are a Redis Cluster hash tag: every key a script touches for
// one partition lands in one slot, while partitions spread over the
// cluster.
func partitionKey(prefix string, pk PartitionKey) string {
	return prefix + ":track:{" + pk.Subscription + ":" + pk.Topic + ":" +
		strconv.FormatInt(int64(pk.Partition), 10) + "}"
}

// subscriptionPattern returns the SCAN MATCH pattern for the keys of one
// subscription. Glob characters in the prefix or id are escaped. The
// pattern also matches subscriptions whose id extends this one across a
// colon, so callers check each key with parsePartitionKey.
func subscriptionPattern(prefix, subscription string) string {
	return globEscape(prefix+":track:{"+subscription+":") + "*"
}

// parsePartitionKey inverts partitionKey. Topics and partitions never
// contain a colon, so the subscription is everything before the last two.
func parsePartitionKey(prefix, key string) (PartitionKey, bool) {
	inner, ok := strings.CutPrefix(key, prefix+":track:{")
	if !ok {
		return PartitionKey{}, false
	}
	inner, ok = strings.CutSuffix(inner, "}")
	if !ok {
		return PartitionKey{}, false
	}
	rest, part, ok := cutLast(inner, ":")
	if !ok {
		return PartitionKey{}, false
	}
	sub, topic, ok := cutLast(rest, ":")
	if !ok {
		return PartitionKey{}, false
	}
	p, err := strconv.ParseInt(part, 10, 32)
	if err != nil {
		return PartitionKey{}, false
	}
	pk := PartitionKey{Subscription: sub, Topic: topic, Partition: int32(p)}
	if pk.validate() != nil || partitionKey(prefix, pk) != key {
		return PartitionKey{}, false
	}
	return pk, true
}

func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

func globEscape(s string) string {
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

// errInvalidKey is wrapped by every PartitionKey validation error.
var errInvalidKey = errors.New("tracking: invalid partition key")

// validate refuses names that would break the key layout: a brace would
// move the hash tag, and a colon in a topic would make keys ambiguous.
// Kafka topic names cannot contain either.
func (pk PartitionKey) validate() error {
	if err := validSubscription(pk.Subscription); err != nil {
		return err
	}
	switch {
	case pk.Topic == "":
		return fmt.Errorf("%w: empty topic", errInvalidKey)
	case strings.ContainsAny(pk.Topic, "{}:"):
		return fmt.Errorf("%w: topic %q contains '{', '}' or ':'", errInvalidKey, pk.Topic)
	case pk.Partition < 0:
		return fmt.Errorf("%w: negative partition %d", errInvalidKey, pk.Partition)
	}
	return nil
}

func validSubscription(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty subscription id", errInvalidKey)
	case strings.ContainsAny(id, "{}"):
		return fmt.Errorf("%w: subscription id %q contains '{' or '}'", errInvalidKey, id)
	}
	return nil
}
