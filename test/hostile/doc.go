// Package hostile runs keyhook's webhook client against endpoints that
// misbehave on purpose: raw sockets that answer with bytes nobody asked
// for, heads that never end, informational answers without end, bodies
// that never finish, connections closed at the worst moment, statuses
// outside HTTP's range. Every attack runs against both transports, the
// http1 client and net/http (the stale-bytes, cross-path, head and body
// attacks over TCP and behind TLS), beside a healthy endpoint on the same
// client, and checks the two things that matter: an answer is only ever
// taken for the request it followed, so a refused record is never acked,
// and what an endpoint sends costs a node bounded memory.
//
// It has no code of its own, only tests. To run them alone:
//
//	go test -race ./test/hostile
//
// TestNodeMemoryUnderHeadAttacks runs a keyhook node as its own process
// and logs its resident memory under each attack (-v shows the figures).
package hostile
