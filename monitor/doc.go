// Package monitor watches, for the nodes together, what an operator must
// hear about an endpoint: how long it has been failing (a subscription's
// failing streak, shared in Redis, which pauses a subscription with
// disable_after) and how many dead letters a subscription wrote in a
// window (the deadletters.threshold_exceeded event).
//
// The dispatcher tells a [Monitor] of each attempt's outcome and each
// dead letter; the Monitor adds them up in memory and writes them to
// Redis once per interval, one script call per subscription that had any,
// so the hot path pays a map update under a lock, not a round trip. It
// pauses a subscription through the subscription store, the path an
// operator's pause takes, and emits events; it knows nothing of Kafka or
// HTTP.
package monitor
