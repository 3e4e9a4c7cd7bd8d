package sharing

import (
	"cmp"
	"slices"

	"github.com/keyhook/keyhook/keyrange"
)

// Assignment is what a member consumes: topic → partition → the hashes of
// that partition it delivers. keyrange.Full() is the whole partition.
type Assignment map[string]map[int32]keyrange.Set

// Get returns the ranges of a partition, nil when it is not in a.
func (a Assignment) Get(topic string, partition int32) keyrange.Set {
	return a[topic][partition]
}

// set stores s for the partition, or removes the partition when s is empty.
func (a Assignment) set(topic string, partition int32, s keyrange.Set) {
	if s.IsEmpty() {
		if ps := a[topic]; ps != nil {
			delete(ps, partition)
			if len(ps) == 0 {
				delete(a, topic)
			}
		}
		return
	}
	ps := a[topic]
	if ps == nil {
		ps = make(map[int32]keyrange.Set)
		a[topic] = ps
	}
	ps[partition] = s
}

// Clone returns a deep copy of a.
func (a Assignment) Clone() Assignment {
	out := make(Assignment, len(a))
	for t, ps := range a {
		for p, s := range ps {
			out.set(t, p, slices.Clone(s))
		}
	}
	return out
}

// Member is one group member as the leader sees it when it plans.
type Member struct {
	// ID is the member ID the coordinator gave the member.
	ID string
	// Topics are the topics the member wants to consume.
	Topics []string
	// Owned is what the member still owns: what it was assigned and has
	// not finished draining (see Balancer.Released).
	Owned Assignment
	// Generation is the group generation the member last synced in; it
	// decides between overlapping claims.
	Generation int32
}

// tp is one partition of one topic.
type tp struct {
	topic     string
	partition int32
}

func compareTP(a, b tp) int {
	if c := cmp.Compare(a.topic, b.topic); c != 0 {
		return c
	}
	return cmp.Compare(a.partition, b.partition)
}

// Plan decides what every member gets in this generation: member ID →
// Assignment (empty, never nil, for a member that gets nothing). members
// are in the order franz-go gives them (by instance ID, then member ID);
// partitions is the partition count of every topic some member wants.
// With sharing off every partition goes whole to one member. The rules
// are in the package documentation.
//
// Plan is pure and deterministic: the same input gives the same plan.
func Plan(members []Member, partitions map[string]int32, sharing bool) map[string]Assignment {
	members = uniqueMembers(members)
	out := make(map[string]Assignment, len(members))
	for _, m := range members {
		out[m.ID] = Assignment{}
	}
	if len(members) == 0 {
		return out
	}

	interested, parts, nActive := interests(members, partitions)
	if len(parts) == 0 {
		return out
	}
	raw, eff := claims(members, partitions)
	k := sharerCounts(parts, interested, nActive, sharing)
	sharers := assignSlots(members, parts, k, interested, eff, nActive)

	for _, p := range parts {
		targets := carve(sharers[p], eff, p)
		for _, i := range sharers[p] {
			t := targets[i]
			if !grantable(i, p, t, raw, eff) {
				continue
			}
			out[members[i].ID].set(p.topic, p.partition, t)
		}
	}
	return out
}

// uniqueMembers drops repeated member IDs, keeping the first: the plan is
// keyed by member ID, and a repeat would make two members of one.
func uniqueMembers(members []Member) []Member {
	seen := make(map[string]bool, len(members))
	out := make([]Member, 0, len(members))
	for _, m := range members {
		if !seen[m.ID] {
			seen[m.ID] = true
			out = append(out, m)
		}
	}
	return out
}

// interests returns, per member, the topics it wants that have
// partitions; the sorted partitions of every topic someone wants; and the
// number of members that want at least one of them.
func interests(members []Member, partitions map[string]int32) ([]map[string]bool, []tp, int) {
	interested := make([]map[string]bool, len(members))
	wanted := make(map[string]bool)
	active := 0
	for i, m := range members {
		interested[i] = make(map[string]bool, len(m.Topics))
		for _, t := range m.Topics {
			if partitions[t] > 0 {
				interested[i][t] = true
				wanted[t] = true
			}
		}
		if len(interested[i]) > 0 {
			active++
		}
	}
	var parts []tp
	for t := range wanted {
		for p := range partitions[t] {
			parts = append(parts, tp{t, p})
		}
	}
	slices.SortFunc(parts, compareTP)
	return interested, parts, active
}

// claims returns every member's ownership claims on existing partitions
// (raw) and the claims that stand (eff): a hash claimed by a member of a
// strictly higher generation is not the lower member's any more, since
// the lower one missed the generation that moved it.
func claims(members []Member, partitions map[string]int32) (raw, eff []map[tp]keyrange.Set) {
	raw = make([]map[tp]keyrange.Set, len(members))
	for i, m := range members {
		raw[i] = make(map[tp]keyrange.Set)
		for t, ps := range m.Owned {
			for p, s := range ps {
				if p < 0 || p >= partitions[t] || s.IsEmpty() {
					continue
				}
				raw[i][tp{t, p}] = s
			}
		}
	}
	eff = make([]map[tp]keyrange.Set, len(members))
	for i := range members {
		eff[i] = make(map[tp]keyrange.Set, len(raw[i]))
		for p, s := range raw[i] {
			for j := range members {
				if members[j].Generation > members[i].Generation {
					s = s.Minus(raw[j][p])
				}
			}
			if !s.IsEmpty() {
				eff[i][p] = s
			}
		}
	}
	return raw, eff
}

// sharerCounts returns k_p, the number of members each partition is split
// among: 1 without sharing or when there are no more members than
// partitions; otherwise ⌊N/P⌋, one more for the first N mod P partitions.
// A partition is never split among more members than want its topic.
func sharerCounts(parts []tp, interested []map[string]bool, nActive int, sharing bool) map[tp]int {
	perTopic := make(map[string]int)
	for _, in := range interested {
		for t := range in {
			perTopic[t]++
		}
	}
	k := make(map[tp]int, len(parts))
	n, np := nActive, len(parts)
	for idx, p := range parts {
		kp := 1
		if sharing && n > np {
			kp = n / np
			if idx < n%np {
				kp++
			}
		}
		k[p] = max(1, min(kp, perTopic[p.topic]))
	}
	return k
}

// assignSlots chooses the members that share each partition: every member
// gets ⌊U/N⌋ or ⌈U/N⌉ of the U slots, only of topics it wants and at most
// one slot per partition. Members keep the partitions they own first,
// largest ownership first; the rest go to the least loaded members.
func assignSlots(members []Member, parts []tp, k map[tp]int, interested []map[string]bool, eff []map[tp]keyrange.Set, nActive int) map[tp][]int {
	units := 0
	for _, p := range parts {
		units += k[p]
	}
	base, extra := units/nActive, units%nActive
	count := make([]int, len(members))
	fits := func(i int) bool { return count[i] < base || (count[i] == base && extra > 0) }
	sharers := make(map[tp][]int, len(parts))
	take := func(i int, p tp) {
		if count[i] >= base {
			extra--
		}
		count[i]++
		sharers[p] = append(sharers[p], i)
	}
	open := func(i int, p tp) bool {
		return interested[i][p.topic] && len(sharers[p]) < k[p] && !slices.Contains(sharers[p], i)
	}

	type cand struct {
		size   uint32
		member int
		part   int
	}
	var cands []cand
	for pi, p := range parts {
		for i := range members {
			if s := eff[i][p]; !s.IsEmpty() {
				cands = append(cands, cand{s.Len(), i, pi})
			}
		}
	}
	slices.SortFunc(cands, func(a, b cand) int {
		if c := cmp.Compare(b.size, a.size); c != 0 {
			return c
		}
		if c := cmp.Compare(a.member, b.member); c != 0 {
			return c
		}
		return cmp.Compare(a.part, b.part)
	})
	for _, c := range cands {
		if p := parts[c.part]; open(c.member, p) && fits(c.member) {
			take(c.member, p)
		}
	}

	// Partitions of topics few members want go first, so that a member
	// that alone wants a topic is not already full when its turn comes.
	perTopic := make(map[string]int)
	for _, in := range interested {
		for t := range in {
			perTopic[t]++
		}
	}
	fillOrder := slices.Clone(parts)
	slices.SortStableFunc(fillOrder, func(a, b tp) int { return cmp.Compare(perTopic[a.topic], perTopic[b.topic]) })
	for _, p := range fillOrder {
		for len(sharers[p]) < k[p] {
			// Prefer a member under its quota; when interests are
			// uneven no such member may want the topic, and a slot
			// nobody takes would leave hashes undelivered.
			best, bestFits := -1, false
			for i := range members {
				if !open(i, p) {
					continue
				}
				f := fits(i)
				if best < 0 || (f && !bestFits) || (f == bestFits && count[i] < count[best]) {
					best, bestFits = i, f
				}
			}
			if best < 0 {
				break
			}
			take(best, p)
		}
	}
	return sharers
}

// carve splits partition p among its sharers: quotas are the sizes of
// keyrange.Split(k), the larger ones to the members owning most of p;
// each sharer keeps the lowest hashes of what it owns up to its quota, and
// sharers short of their quota take the lowest hashes nobody keeps. With
// nothing owned this is exactly keyrange.Split(k), in member order.
func carve(sharers []int, eff []map[tp]keyrange.Set, p tp) map[int]keyrange.Set {
	order := slices.Clone(sharers)
	slices.SortStableFunc(order, func(a, b int) int {
		if c := cmp.Compare(eff[b][p].Len(), eff[a][p].Len()); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	quotas := keyrange.Split(len(order))
	keep := make(map[int]keyrange.Set, len(order))
	var kept keyrange.Set
	for n, i := range order {
		// Same-generation claims may overlap: what an earlier sharer
		// keeps is not the later one's to keep.
		keep[i] = lowest(eff[i][p].Minus(kept), quotas[n].Len())
		kept = kept.Union(keep[i])
	}
	free := keyrange.Full().Minus(kept)
	targets := make(map[int]keyrange.Set, len(order))
	for n, i := range order {
		t := keep[i]
		if need := quotas[n].Len() - t.Len(); need > 0 {
			more := lowest(free, need)
			free = free.Minus(more)
			t = t.Union(more)
		}
		targets[i] = t
	}
	return targets
}

// lowest returns the n lowest hashes of s (all of s when it has fewer).
func lowest(s keyrange.Set, n uint32) keyrange.Set {
	var out keyrange.Set
	for _, r := range s {
		if n == 0 {
			break
		}
		if r.Len() > n {
			r.Hi = r.Lo + n
		}
		out = append(out, r)
		n -= r.Len()
	}
	return out
}

// grantable reports whether member i may get target t of partition p in
// this generation (rule 2 of the package documentation): a member that
// owns part of p gets t only if it already owns all of it, which makes
// the change an in-place shrink; a member that owns nothing of p gets t
// only if no other member still claims a hash of it.
func grantable(i int, p tp, t keyrange.Set, raw, eff []map[tp]keyrange.Set) bool {
	if !raw[i][p].IsEmpty() {
		return eff[i][p].Covers(t)
	}
	for j := range raw {
		if j != i && raw[j][p].Overlaps(t) {
			return false
		}
	}
	return true
}
