// Package nodes owns the live node registry: each keyhook process
// heartbeats its identity (id, version, roles, start time) and the
// partitions it owns into one Redis hash, and anyone can list the nodes
// heard from recently.
//
// A node is live while its last heartbeat is at most Config.LiveFor old,
// judged at read time with the reader's clock; nodes' clocks are assumed
// to agree within a second or so (NTP). Entries of nodes that stopped
// without removing themselves (killed, partitioned) are filtered out at
// once and deleted after Config.PruneAfter.
//
// The package knows Redis and nothing of Kafka or HTTP: the dispatcher's
// ownership reaches it as a function, and the API lists it.
package nodes
