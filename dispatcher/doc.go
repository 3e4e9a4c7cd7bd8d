// Package dispatcher turns Kafka partitions into concurrent HTTP deliveries.
//
// A Node runs one consumer group per subscription. Each assigned partition
// gets a worker that splits the partition into key lanes (only a lane's head
// is in flight), bounds the window between the watermark and the fetch
// position by pausing the fetch, writes its acked ranges to the tracker in
// batches and lets the group's committer move the Kafka commit to the
// watermark. On revoke a worker drains, flushes and commits before it lets
// go; a node that takes a partition over claims it in the tracker (a new
// epoch fences the old owner) and skips what was already acked. Where an
// assigned partition starts is checked against the log and its tracking
// state before it is consumed (start.go): an expired commit resumes at the
// tracked watermark, a stale one gives way to the log start.
//
// The package knows Kafka and the delivery contract; it knows nothing of
// HTTP details (webhooks does) nor of Redis (tracking does).
package dispatcher
