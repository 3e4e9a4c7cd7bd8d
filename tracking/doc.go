// Package tracking is the Redis model of each partition's delivery
// progress: which offsets at or above the watermarks are acked, how far
// each claim fetched, what is pending and in flight, the mirror of the
// last Kafka commit, and who claims which part of the partition under
// which epoch.
//
// One Redis HASH per (subscription, topic, partition) holds that state
// (internal/keyspace names it, keys.go its fields), so a script acts on
// each partition's key alone and stays valid on Redis Cluster. A node
// claims a partition, or some ranges of its key hash space (keyrange)
// when several nodes share it, which gives it a new epoch; it then
// flushes its in-memory state every few milliseconds in one script call
// that is refused once a newer claim took any of its ranges: a zombie
// therefore cannot overwrite the state of the node that replaced it. A
// node writes all its partitions in one round trip (FlushRanges,
// ReleaseMany); a flush round is one script call for every
// partition on a single server, and one per hash slot on Redis Cluster,
// whose scripts may not span slots. Every multi-step change is one Lua
// script (scripts.go), so the state is never half-written.
//
// The hash space is cut into pieces, each with its own watermark: every
// record below it whose hash is in the piece was delivered. Facts compose:
// an acked offset stays acked whoever owns its hash next, and the least
// of the pieces' watermarks (the merged watermark every flush answers) is
// one no record of any range is below unless delivered; a commit never
// passes it. A claim learns the pieces it takes with their watermarks
// (its floors) and the union of the acked sets of the claims it took
// them from. A HASH written before range claims reads as one claim of the
// whole space, and the first claim over it rewrites it as one, so a
// rolling upgrade loses no acked offset.
//
// A claim that knows the topic's Kafka ID records it, and drops offsets
// recorded under another ID: those of a deleted topic of the same name,
// whose offsets would make the new topic's records look acked.
//
// The package owns the HASH's fields, the scripts and the encoding of
// the stored fields. It must not know about Kafka clients, HTTP or the
// dispatcher: callers bring offsets, ranges, generations and counts, and
// decide what to commit. The offset-range arithmetic lives in the offsets
// subpackage, which knows nothing of Redis.
package tracking
