// Package deadletter owns keyhook's dead letters: the headers a dead
// letter carries, writing one (Writer), and reading a subscription's dead
// letters back for listing and redrive (Reader), and the Redis queue a
// redrive goes through to the owner of the source partition (Queue).
//
// A dead letter is the source record (key, value, timestamp and its own
// headers) followed by a block of keyhook-* headers that say where it came
// from and why it failed. Only keyhook writes that block: a source
// record's own keyhook-* headers are dropped when it is dead-lettered, and
// readers take the last header of a name, so a producer cannot make its
// record pass for another subscription's dead letter. Every dead letter
// carries the path of subscriptions that dead-lettered it; a record that
// comes back to a subscription on its path, or has gone MaxHops hops, is
// refused (ErrLoop) instead of written again, which bounds dead-letter
// loops between subscriptions.
//
// The package knows Kafka (franz-go), Redis (the queue only) and the
// subscription type. It does not know how a record becomes a webhook:
// redrive queues records, which the dispatcher node owning their
// partition takes and sends.
package deadletter
