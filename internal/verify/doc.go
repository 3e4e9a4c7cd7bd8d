// Package verify checks keyhook's delivery guarantees on what a test left
// behind: the log of a topic, its dead-letter topic, the consumer group's
// commits (sampled while the test ran) and every request a
// testutil.Sink answered. The fault suite and the conformance suite share
// it, so a guarantee is defined once:
//
//  1. at-least-once: every committed data record of the log was acked by
//     the endpoint or dead-lettered;
//  2. per-key order (when asked): per key and partition, first deliveries
//     in offset order, each sent after the previous one was answered;
//  3. the commit never moved backwards, never passed an offset that was
//     not yet acked, dead-lettered or a gap, and reached every log end;
//  4. duplicates within the bound the test's failures allow (0 without
//     failures); and, across every node, no request of a key sent while
//     another of that key was in flight at the sink (an overlap), except
//     after a failure, within the same bound — with several nodes sharing
//     a partition by key range, per-key order also depends on a range
//     never having two owners.
//
// Records carry their sequence number as {"seq":N} ([Record]), so the
// verifier can also check the log against what producers were told.
// It knows keyhook only as an operator does: the dead-letter headers, the
// consumer group, the HTTP requests.
package verify
