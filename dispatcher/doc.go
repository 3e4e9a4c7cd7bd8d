// Package dispatcher turns Kafka partitions into concurrent HTTP deliveries.
//
// A Node runs one consumer group per subscription. Each assigned partition
// gets a worker that splits the partition into key lanes (only a lane's head
// is in flight), bounds the window between the watermark and the fetch
// position by pausing the fetch, hands its acked ranges to the node's
// flusher and lets the group's committer move the Kafka commit to the
// watermark of the last successful flush. The flusher writes every
// partition of the node in one pipelined round per tick; a worker hands
// its snapshot over as soon as its state changed, wakes only for events
// and for what comes due (clock.go), and its loop never waits on the
// tracker, so a slow Redis delays commits, not
// deliveries, within the ownership lease: each write the tracker accepts
// lets the partition start deliveries for the session timeout less a
// heartbeat (Config.lease), so a node frozen long enough to lose its
// partitions asks the tracker before it delivers again. The group
// coordinator must have answered the node within as long (liveness.go):
// a node cut from Kafka alone stops starting deliveries a heartbeat
// before the group can give its partitions away. On revoke the
// workers drain, then all of them are flushed in one round, committed,
// and released in one round, under one deadline; a node that takes a
// partition over claims it in the tracker (a new epoch fences the old
// owner) and skips what was already acked.
//
// A subscription's delivery pool has max_in_flight slots, each running one
// attempt at a time (pool.go): a delivery waiting for its next attempt
// waits on a timer, off every slot, so a retrying record blocks only its
// own key. A drain ends those waits at once and lets attempts in flight run
// to their own timeout.
//
// Redriven dead letters of an owned partition are taken from their queue
// and injected on their key's lane, so they never go beside a record of
// the key in flight.
//
// Where an assigned partition starts is checked against the log and its
// tracking state before it is consumed (start.go): an expired commit
// resumes at the tracked watermark, a stale one gives way to the log start.
//
// The package knows Kafka and the delivery contract; it knows nothing of
// HTTP details (webhooks does) nor of Redis (tracking does).
package dispatcher
