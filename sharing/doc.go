// Package sharing is the consumer group balancer that lets several nodes
// share one partition by key hash.
//
// Each sharer fetches the whole partition and delivers only the records
// whose hash (keyrange.Of) falls in its ranges, so a group may usefully
// have more members than partitions. Membership, generations and commit
// fencing stay Kafka's: Balancer is a kgo.GroupBalancer (classic protocol,
// cooperative, protocol name keyhook-sharing-v1) whose JoinGroup metadata
// and SyncGroup assignments are the standard consumer ones, with the
// ranges in their UserData. Every partition a member owns is listed there,
// whole ones too, so franz-go fetches, revokes and commits as usual.
//
// The package owns the plan and its encoding. It does not know how
// records are filtered, drained or tracked: the caller reads Assigned (or
// OnSync) to filter, and calls Released and ForceRebalance once a shrink
// is drained.
//
// # The plan
//
// Plan decides each generation; the leader runs it on every member's
// reported ownership.
//
//  1. Target. With sharing on and more members (N) than partitions (P) of
//     the topics they want, partition p is split among k_p members:
//     ⌊N/P⌋, one more for the first N mod P partitions sorted by topic and
//     partition. Otherwise every partition goes whole to one member.
//     Slots are spread evenly (each member gets ⌊U/N⌋ or ⌈U/N⌉ of the U
//     slots, only of topics it wants, one per partition) and stickily:
//     members keep the partitions they own, largest ownership first (ties
//     by member order), the rest go to the least loaded members. The k_p
//     sharers of a partition get ranges of the sizes of keyrange.Split(k_p),
//     the larger ones to those owning most of it; each keeps the lowest
//     hashes of what it owns up to its size, and those short of it take the
//     lowest hashes nobody keeps. A group that owns nothing gets exactly
//     keyrange.Split(k_p) in member order; later the boundaries are sticky
//     rather than Split's, which is what keeps scale-out shrink-only (3).
//
//  2. Cooperative at range level: a hash never has two owners in one
//     generation. For member M and partition p, with C what M reports it
//     owns and T its target: if T ⊆ C, M gets T now (the same, or an
//     in-place shrink: M drains C∖T, calls Released and forces a
//     rebalance). If T ⊄ C and C is not empty, M gets nothing of p this
//     generation: franz-go revokes p, M drains it and rejoins, and the
//     next generation gives T. If C is empty, M gets T only if no other
//     member claims a hash of T (they keep their claims until they
//     rejoin); otherwise nothing this generation. When claims overlap (a
//     member missed a generation), a hash belongs to the claim of the
//     highest generation; lower claims on it are ignored for what a
//     member keeps, and still block giving it to a member that owns
//     nothing of p.
//
//  3. Convergence and stability. A group whose members own exactly what
//     they were given plans the same again: no rebalance loop. Adding one
//     member to a settled group of N ≥ P members only shrinks existing
//     members (the sizes of Split(N+1), largest first, are never larger
//     than those of Split(N)): they shrink in place in the first
//     generation, and the newcomer gets the freed hashes — possibly
//     several ranges — in the next one, once they are released. Nobody
//     restarts. (With Split's own boundaries N−2 members would restart:
//     every boundary of Split(N+1) but the first and last falls inside
//     a range of Split(N).) Removing a member gives its ranges to the
//     others; a member whose share grows cannot grow in place (its fetch
//     position is past the hashes it gains), so it restarts: it gets
//     nothing of the partition for one generation and its new ranges in
//     the next.
//     A change of membership thus settles in two generations: one to
//     shrink or revoke, one to hand out what was freed.
//
//  4. Members that left the group own nothing: their ranges are free at
//     once. A zombie still delivering them is fenced by the range claims
//     of the tracking store, not here.
//
// # The shrink contract
//
// A shrink keeps the partition assigned in franz-go, so nothing revokes
// it. The member must stop delivering the hashes it lost, wait for those
// in flight, flush their progress, then call Released(topic, partition,
// keep) with its new ranges and (*kgo.Client).ForceRebalance. Until
// Released, JoinGroupMetadata reports the old ranges too, so that the
// group gives them to nobody; a member that never calls it keeps them
// from everyone.
package sharing
