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
//
// Several claims may share a partition, each over part of the key hash
// space (keyrange). The HASH holds three kinds of fields:
//
//   - partition-wide: epoch, committed, topicid and pieces;
//   - per claim, named "c:<epoch>:<name>" (claimField): owner, gen,
//     ranges, acked, fetched, pending, inflight, keys, oldest, claimed,
//     updated, holding, stalled;
//   - legacy: the per-claim names without a prefix, written by releases
//     before range claims, when one owner held the whole partition. A
//     HASH holding gen at the top is of that layout and reads as one
//     claim of the whole space (see the upgrade function of scripts.go).
const (
	fieldEpoch     = "epoch"     // last epoch issued; only grows
	fieldGen       = "gen"       // Kafka group generation of the claim
	fieldOwner     = "owner"     // node id of the claim
	fieldAcked     = "acked"     // the claim's acked offsets, offsets.Set binary encoding
	fieldWatermark = "watermark" // legacy only: lowest offset not acked
	fieldFetched   = "fetched"   // next offset the claim fetches
	fieldCommitted = "committed" // mirror of the last Kafka commit, -1 none; only grows
	fieldPending   = "pending"   // fetched at/above the watermark, not acked
	fieldInFlight  = "inflight"  // dispatched to the endpoint right now
	fieldKeys      = "keys"      // keys with a record in flight or queued
	fieldOldest    = "oldest"    // dispatch time of the oldest pending record, 0 none
	fieldClaimed   = "claimed"   // when the claim was made
	fieldUpdated   = "updated"   // last claim, flush or release of the claim
	fieldTopicID   = "topicid"   // Kafka topic ID (KIP-516) the offsets belong to, "" unknown
	fieldPieces    = "pieces"    // the index of pieces, see encodePieces
	fieldRanges    = "ranges"    // the hash ranges a claim declares (keyrange.Set.String)
	fieldHolding   = "holding"   // JSON of the record holding the claim's watermark (Holding), "" none
	fieldStalled   = "stalled"   // JSON of the claim's keys not flowing (StalledKeys), absent none
)

// partitionFields are the partition-wide fields of the current layout.
var partitionFields = []string{fieldEpoch, fieldCommitted, fieldTopicID, fieldPieces}

// claimFields are the names of a claim's fields (claimField).
var claimFields = []string{fieldOwner, fieldGen, fieldRanges, fieldAcked, fieldFetched, fieldPending, fieldInFlight,
	fieldKeys, fieldOldest, fieldClaimed, fieldUpdated, fieldHolding, fieldStalled}

// claimPrefix starts the fields of one claim: "c:<epoch>:".
const claimPrefix = "c:"

// claimField names field name of the claim of epoch.
func claimField(epoch int64, name string) string {
	return claimPrefix + strconv.FormatInt(epoch, 10) + ":" + name
}

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
