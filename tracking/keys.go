package tracking

import (
	"errors"
	"fmt"
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
	fieldTopicID   = "topicid"   // Kafka topic ID (KIP-516) the offsets belong to, "" unknown
)

// key returns the name of pk's tracking HASH (keyspace.Partition).
func (s *Store) key(pk PartitionKey) string {
	return s.keys.Partition(pk.Subscription, pk.Topic, pk.Partition)
}

// parseKey inverts key, refusing keys of partitions that validate refuses.
func (s *Store) parseKey(key string) (PartitionKey, bool) {
	sub, topic, partition, ok := s.keys.ParsePartition(key)
	pk := PartitionKey{Subscription: sub, Topic: topic, Partition: partition}
	if !ok || pk.validate() != nil {
		return PartitionKey{}, false
	}
	return pk, true
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
