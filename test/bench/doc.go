// Command bench measures keyhook against what users run today and against
// what the machine allows, on one machine, in one process tree.
//
//	go run ./test/bench                      # every scenario, ~15 minutes on 2 cores
//	go run ./test/bench -kafka kfake         # on franz-go's in-process Kafka, no Java needed
//	go run ./test/bench -scenarios 1,3       # some of them (2 is 2a and 2b)
//	go run ./test/bench -scenarios 6         # key-range sharing alone: 1 to 4 nodes on 1 partition
//	go run ./test/bench -kafka kfake -scenarios 7 -out test/bench/results/stuck   # the stuck key, ~25 minutes
//	go run ./test/bench -quick               # a CI-sized smoke run
//	go run ./test/bench -records 20000       # override every scenario's record count
//	go run ./test/bench -contenders key,ceiling-a -profile   # pprof of the keyhook runs
//
// Other flags: -out (default test/bench/results), -latency fixed|uniform|lognormal
// for the 50 ms endpoint, -error-rate, and keyhook settings other than the
// ones cmd/keyhook uses: -max-window (the partition window),
// -flush-interval (tracking flushes) and -idle-conns (the webhooks
// client's idle connection pool).
//
// The parent process owns the shared parts: a Kafka (-kafka auto, the
// default: the broker named by KEYHOOK_TEST_KAFKA_BROKERS, else a real
// single-node broker it starts with scripts/kafka.sh when java and mvn are
// on PATH, which the Parallel Consumer needs, else franz-go's kfake in
// process; -quick always uses kfake), a real
// redis-server it starts itself, an HTTP sink whose latency distribution,
// error rate and one hot, slow or failing key are configurable, and the
// producer that preloads each scenario's records. Every contender runs as
// a child process (the bench binary re-executed in a contender mode), so
// the CPU time, peak memory and heap measured are the contender's alone:
//
//   - baseline: a plain franz-go group consumer posting one record at a
//     time per partition, committing as it goes;
//   - keyhook: an in-process node built by app.Build, as keyhook serve
//     --roles dispatcher builds it (the real tracking store on the real
//     redis-server, the real webhooks.Client), with ordering key,
//     partition and none;
//   - ceiling A: the same webhooks.Client (its http1 client, for the
//     sink's plain http) posting the same requests with the same
//     concurrency, without Kafka or Redis: the best this Go client does;
//   - ceiling B: consuming the same records without HTTP;
//   - keyhook key, shared read (scenarios 1 and 3): keyhook key with
//     --shared-read, the subscription a cursor over one reader of its
//     topics, against keyhook key with a consumer group of its own;
//   - Parallel Consumer: Confluent's parallel-consumer-core 0.5.3.2 on the
//     JVM (test/bench/pc, built with Maven when java and mvn are on PATH,
//     reported skipped otherwise), ordering KEY, maxConcurrency the
//     scenario's max_in_flight, posting through a blocking HTTP client.
//
// Scenario 6 is of another kind (sharing.go): keyhook key alone, on one
// partition, run with 1, 2, 3 and 4 nodes, each node a child process of
// its own in the subscription's consumer group, so that beyond one node
// they share the partition by key range. Its rate is taken once every
// node's key hashes settled (keyhook.partition.key_hashes), and compared
// with linear scaling of the one-node rate (goal: 0.85×).
//
// Scenario 7 is of a third kind (stuck.go), and runs only when named: a
// ~25-minute run would more than double the default one. keyhook key, a
// child process, on one partition of 10,000 keys while records are
// produced at a steady rate (-stuck-rate, 5,000 rec/s), three runs: (a)
// no failure, for -stuck-baseline (2 min): the no-failure rate; (b) one
// key carrying -stuck-share (0.2%) of the records answered 503 for
// -stuck-fail (10 min), production going on -stuck-after (1 min) once it
// recovered, then up to -stuck-drain (10 min) to deliver the rest; (c)
// one key carrying -stuck-slow-share (1%) answered in 1 s, for
// -stuck-slow (5 min), then up to -stuck-slow-drain (1 min). Per 10 s
// window it reports the other keys' delivered rate and its ratio to run
// a's (goal ≥ 0.95 in every window), the node's RSS (/proc VmRSS), its
// parked records (keyhook.records.parked), the partition's gaps and the
// Redis bytes of its tracking hash (goal ≤ 64 per gap at the most gaps),
// and at the end the stuck key's records delivered, in order, and how
// long after its recovery the last one was (results.md, stuck.png).
//
// The sink records, for every record, when it was first answered 2xx and
// the end-to-end latency from the record's timestamp (carried in the body),
// and checks per-key order. The results are written as a markdown table
// per scenario with the targets marked PASS or MISS (results.md) and a bar
// chart of the throughputs (throughput.png).
//
// The package owns the harness only: it must not know keyhook's internals
// beyond the exported API of dispatcher, tracking, webhooks and
// subscription, which it wires the way cmd/keyhook does.
package main
