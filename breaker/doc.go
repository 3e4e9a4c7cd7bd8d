// Package breaker is a circuit breaker per endpoint origin, per node.
//
// A breaker is closed while its origin answers. After Failures
// consecutive failed attempts (5xx, 408, 425, timeouts, connection
// errors: the endpoint is down, not refusing one record) it opens: no
// request goes to the origin, and its deliveries wait without spending
// attempts. After Interval it is half-open: exactly one attempt at a time,
// the probe, goes through; its success closes the breaker, its failure
// opens it for another Interval. A 429 is neither a failure nor a success:
// the endpoint is up and asks for less, which the per-origin AIMD limiter
// (webhooks.Limiter) already gives it.
//
// The package owns the state machine (machine, pure, fuzzed), its
// concurrent form with the timer and the waiters (Breaker), and the set of
// them by origin (Set). It knows nothing of HTTP or Kafka: the caller
// classifies an attempt as a Verdict, and parks what a breaker holds back.
package breaker
