// Package events sends keyhook's operational events to an operator: a
// subscription paused by a node, an endpoint's circuit breaker opened or
// closed, dead letters past a threshold, a cursor detached from its
// reader. Every event has one JSON shape ([Event], CloudEvents-style),
// and an [Emitter] sends it as a Standard Webhooks signed POST to the
// operator's endpoint and/or as a record of a Kafka topic.
//
// The package owns the event schema, the bounded queue (the oldest event
// is dropped, and counted, rather than the queue growing) and the one
// goroutine that sends. It knows nothing of subscriptions, Redis or the
// dispatcher: they build events with the constructors here and hand them
// to Emit, which never blocks.
package events
