// Package conformance runs keyhook's guarantees across every
// configuration it supports, the way watermill's pubsub/tests runs one
// suite against every Pub/Sub: each behaviour is written once, in a table,
// and run against each configuration.
//
//   - Delivery (delivery_test.go): a node built by app.Build, as keyhook
//     serve builds it, on orderings key, partition and none, with batching
//     off and on, on kfake and on the real broker of
//     KEYHOOK_TEST_KAFKA_BROKERS (skipped with a message when unset; CI
//     always sets it). A second node joins half-way and the first leaves
//     gracefully; package internal/verify, the fault suite's verifier,
//     then checks at-least-once, per-key order, commits never backwards
//     nor past an unacked offset, and no duplicate (no failure happened).
//   - Stores (stores_test.go): the tracking, subscription and token stores
//     and the node registry, through connect.NewRedis as a node connects,
//     on a single Redis, a Redis Cluster, a Sentinel-watched primary and a
//     single Redis where keyhook is an ACL user with least privilege.
//
// Every cell is small (a few thousand records) so the whole suite stays
// under two minutes with -race on two cores.
package conformance
