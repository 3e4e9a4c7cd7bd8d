// Package configlog keeps keyhook's configuration — subscriptions and API
// tokens — in a compacted Kafka topic, so that Redis holds a copy of it and
// never the only one.
//
// Every change a store makes is first written to the topic (Log.Put,
// Log.Delete), keyed "<kind>/<id>" and carrying the entry's version in a
// header; a delete is a tombstone (a null value) with the version that
// deleted it. The write waits for every in-sync replica (acks=all, an
// idempotent producer), so a change the API confirmed survives any Redis.
// Put refuses a version the log is known to have passed (ErrStale): a
// change computed from a Redis that is behind the log must not be
// recorded as the latest.
//
// Log.Run, one per node, reads the topic from its start into memory and
// keeps tailing it. Every interval it compares what Redis holds (through
// the stores, as Targets) with the log, version by version: an entry Redis
// lacks or holds older is written back, an entry the log deleted is
// removed from Redis, and an entry Redis holds newer than the log, or that
// the log never saw (written before the log existed, or by a tool that
// bypassed it), is appended to the log. The higher version wins
// everywhere, and of two records with one version the later in the log;
// a delete's version is above the version it deleted, so a rolled-back
// Redis never brings a deleted entry back. Tombstones stay in memory for
// as long as the process runs and in the topic for delete.retention.ms
// (seven days when this package creates the topic).
//
// The package knows Kafka (franz-go) and the version rules; it must not
// know Redis or what a subscription or token is: the stores implement
// Target and declare the writer they need themselves.
package configlog
