// Package control carries out the operations an operator asks of a
// subscription's Kafka side, outside the delivery pipeline: Seeker moves
// its consumer group (pause, wait for the group to empty, rewrite the
// commits, forget the acked ranges, resume), StatusReader joins the
// group's commits and log ends with the tracking state its owners flushed,
// StartResolver commits a new subscription's start position for its group
// before the subscription exists, and Cleaner removes what a deleted
// subscription leaves behind (its group, once empty, then its state in
// Redis), from a schedule in Redis that every API node drains.
//
// The package knows Kafka's admin API (kadm), the subscription type and
// the cleanup schedule's one Redis key; it reaches the subscription store
// and the tracker through the small interfaces it declares. It must not know how records are delivered, nor
// HTTP: the API calls it, and the dispatcher notices a seek only as a
// pause, a resume and new commits.
package control
