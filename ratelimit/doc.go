// Package ratelimit shares subscriptions' rate limits between nodes: a
// GCRA (generic cell rate algorithm) in Redis, one key per subscription,
// from which each node takes tokens for the deliveries it has waiting, a
// few at a time.
//
// Why this and not the alternatives: a call per request (as
// go-redis/redis_rate's Allow) costs a round trip per attempt, which a
// node with hundreds of limited keys waiting would pay per token, and
// redis_rate's AllowAtMost, which takes several, charges the fraction of
// a token it does not grant; a fixed share per node (the rate times the
// node's part of the partitions) wastes the share of a node whose keys
// are idle and overshoots while partitions move. Here a node asks only
// when it has deliveries waiting, for as many as wait (at most a burst),
// and the script grants whole tokens and charges only those: the bound
// holds across nodes (no window of one second sees more than per_second
// plus one burst), and subscriptions without a limit never touch Redis.
// The node-share scheme is kept as the fallback while Redis fails (see
// dispatcher.RateTokens).
package ratelimit
