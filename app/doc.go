// Package app wires one keyhook node from one Config: the config log
// (the topic every subscription and token change is recorded in, and
// Redis rebuilt from), the tracking, subscription and token stores, the
// node registry, telemetry, the webhook clients and their limiters, the dispatcher, the operator's admin, the
// status reader, the webhook tester, the REST API and its HTTP server.
//
// Every binary and test that runs a node goes through [Build]: `keyhook
// serve`, `keyhook dev`, the benchmark's keyhook contender and the tests
// that need a whole node. What is built, and in which order, is in one
// function (build.go); how it stops, in one other ([App.Run]).
//
// app owns no connection: the caller connects to Redis and builds the
// Kafka client options (package connect) and closes them after Run
// returns. It holds no logic of its own either; behaviour lives in the
// packages it wires.
package app
