// Package faults proves keyhook's guarantees under failure: real keyhook
// processes killed with signals, a real redis-server restarted or rolled
// back, a real Apache Kafka broker restarted, an endpoint that fails, while
// a real HTTP sink records every delivery. It has no code of its own, only
// tests; it must not know keyhook's internals beyond what an operator sees
// (flags, the tracking HASH fields, the consumer group, the dead-letter
// headers).
//
// The TestFault scenarios belong to the integration tier: they run against
// the broker of KEYHOOK_TEST_KAFKA_BROKERS (scripts/test.sh starts one) and
// are skipped without it, except under CI=true where they fail. Each builds
// a cluster (harness_test.go) — keyhook nodes, Redis, a sink, a subscription
// on a topic of its own, of 12 partitions unless the scenario asks for
// fewer (the key-range sharing scenarios of sharing_test.go run several
// nodes on one partition, the parking scenario of parking_test.go one node
// per partition of two, the shared read's scenarios 50 subscriptions on
// 6 partitions, each with a sink of its own and verified apart) — injects
// its fault, and ends with the
// verifier (package internal/verify, shared with test/conformance), which
// checks that nothing was lost, per-key order held, the commit never moved
// backwards nor passed an offset that was not acked, dead-lettered or a
// gap, the final commit reached every log end, duplicates stayed within
// the scenario's bound, and no request of a key reached the sink while
// another of that key was in flight (an overlap; the sink tells the nodes
// apart by the process owning each connection, so overlaps involving a
// killed or stopped node count apart, within the bound). Each prints one
// line:
//
//	scenario=<name> subscriptions=S records=N lost=0 duplicates=D (bound B) max_commit_overshoot=0 key_overlaps=0 (after a failure F) wall=12.3s
//
// With several subscriptions the line sums over them (records is the
// fewest any one had) and a line per subscription follows.
//
// To run them alone:
//
//	export KEYHOOK_KAFKA_DIR=/tmp/kh-faults
//	export "$(scripts/kafka.sh start | tail -n 1)"
//	go test -race -count=1 -run TestFault -v ./test/faults/
//	scripts/kafka.sh stop
//
// The network partition scenarios (partition_test.go) reach the broker's
// second listener through a proxy (testutil.KafkaCut): they read its
// address from KEYHOOK_KAFKA_DIR, which must name the broker's state dir.
//
// Node logs are kept (their folder is printed) when a scenario fails, or
// always with KEYHOOK_FAULTS_KEEP_LOGS=1. The nodes inherit the test's
// environment, so KEYHOOK_LOG_LEVEL=debug makes them log in detail.
// KEYHOOK_FAULTS_SEED replays the random choices of a logged run.
package faults
