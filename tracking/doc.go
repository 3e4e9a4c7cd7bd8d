// Package tracking is the Redis model of each partition's delivery
// progress: which offsets at or above the watermark are acked, how far the
// owner fetched, what is pending and in flight, the mirror of the last
// Kafka commit, and who owns the partition under which epoch.
//
// One Redis HASH per (subscription, topic, partition) holds that state
// (internal/keyspace names it, keys.go its fields). The owner node claims
// a partition, which gives it a new epoch, then flushes its in-memory
// state every few milliseconds in one script call that is refused once a
// newer owner has claimed the partition; a zombie therefore cannot
// overwrite the state of the node that replaced it. A node writes all its
// partitions in one pipelined round trip (FlushMany, ReleaseMany). Every
// multi-step change is one Lua script (scripts.go), so the state is never
// half-written. A claim that knows the topic's Kafka ID records it, and
// drops offsets recorded under another ID: those of a deleted topic of the
// same name, whose offsets would make the new topic's records look acked.
//
// The package owns the HASH's fields, the scripts and the encoding of
// the stored fields. It must not know about Kafka clients, HTTP or the
// dispatcher: callers bring offsets, generations and counts, and decide
// what to commit. The offset-range arithmetic lives in the offsets
// subpackage, which knows nothing of Redis.
package tracking
