// Package deliverylog keeps, for each delivery id, its attempts: when,
// the status, the latency, an excerpt of the response body and its
// Content-Type and Retry-After, the error. It is kept in Redis for a
// retention period with a cap per subscription, so it survives a node's
// restart and its memory is bounded by the cap, not by the traffic.
//
// Why Redis: every node already writes Redis at every flush, the log is
// read by delivery id (a key lookup) and by recent failures (a sorted
// set), and TTLs and a capped sorted set bound it without a janitor. A
// Kafka topic would keep it as long, but finding one delivery id in it
// means reading the topic.
//
// The layout, per subscription (keys in internal/keyspace): a LIST per
// delivery id of its attempts as JSON, oldest first, expiring with the
// retention; a ZSET of the subscription's logged deliveries scored by
// their latest attempt, which the cap bounds (the oldest delivery goes,
// its list with it); a ZSET of those with a failed attempt, for the list
// of recent failures. All of a subscription's keys share a hash tag, so
// one script writes a batch of them on Redis Cluster.
//
// A [Writer] takes attempts from the delivery goroutines through a
// buffered channel (a full one drops the attempt and counts it, never
// blocks a delivery) and writes them in batches, one pipelined script
// call per subscription, from the goroutine of its Run. A [Reader]
// answers the API.
package deliverylog
