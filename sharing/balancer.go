package sharing

import (
	"cmp"
	"fmt"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keyhook/keyhook/keyrange"
)

// ProtocolName is the group protocol of the Balancer. Every member of a
// group must use it: the coordinator picks a protocol all members offer.
const ProtocolName = "keyhook-sharing-v1"

// Config tunes a Balancer. The zero Config balances whole partitions and
// reports nothing.
type Config struct {
	// Sharing splits partitions by key hash among members when the group
	// has more members than partitions. Off (the default), partitions go
	// whole to one member each, spread evenly and stickily.
	Sharing bool

	// OnSync, if set, is called with the member's full new assignment
	// every time the member syncs, including when nothing changed. It runs
	// on franz-go's group management goroutine, before franz-go revokes
	// or assigns partitions: it must not block (hand the assignment to a
	// goroutine of your own) and must not call back into the client. A
	// partition whose ranges shrank in place stays assigned in franz-go;
	// see Released for what the member owes the group then. The
	// Assignment is the callee's to keep.
	OnSync func(Assignment)
}

// Balancer is a kgo.GroupBalancer for key-range sharing. Give it to one
// client only (kgo.Balancers), since it keeps that member's assignment.
// It is safe for concurrent use.
type Balancer struct {
	sharing bool
	onSync  func(Assignment)

	mu sync.Mutex
	// assigned is the assignment of the latest sync.
	assigned Assignment
	// owned is what the member still owns: assigned plus the ranges it
	// was shrunk out of and has not reported drained (Released).
	owned Assignment
}

var _ kgo.GroupBalancer = (*Balancer)(nil)

// New returns a Balancer for one client. No Config is invalid today; the
// error is there for the fields to come.
func New(cfg Config) (*Balancer, error) {
	return &Balancer{
		sharing:  cfg.Sharing,
		onSync:   cfg.OnSync,
		assigned: Assignment{},
		owned:    Assignment{},
	}, nil
}

// ProtocolName implements kgo.GroupBalancer.
func (*Balancer) ProtocolName() string { return ProtocolName }

// IsCooperative implements kgo.GroupBalancer: members keep consuming
// across a rebalance and give up only what moves.
func (*Balancer) IsCooperative() bool { return true }

// Assigned returns the ranges of a partition in the latest sync, nil if
// the partition is not assigned to this member.
func (b *Balancer) Assigned(topic string, partition int32) keyrange.Set {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.assigned.Get(topic, partition))
}

// Released tells the balancer that the member has finished delivering
// every hash of the partition outside keep: nothing of them is in flight
// and their progress is in the tracking store. Call it after a sync
// shrank the partition in place (OnSync shows fewer ranges for a partition
// that stays assigned), with keep the new ranges, then call
// (*kgo.Client).ForceRebalance: until then the member reports it still
// owns the old ranges, and the group gives them to nobody else. Released
// never gives up ranges of the latest sync; on a partition the member no
// longer owns it does nothing.
func (b *Balancer) Released(topic string, partition int32, keep keyrange.Set) {
	b.mu.Lock()
	defer b.mu.Unlock()
	cur := b.owned.Get(topic, partition)
	if cur == nil {
		return
	}
	// A keep older than the latest sync must not drop what that sync
	// gave: the member is delivering it.
	b.owned.set(topic, partition, cur.Intersect(keep.Union(b.assigned.Get(topic, partition))))
}

// JoinGroupMetadata implements kgo.GroupBalancer. For each partition
// franz-go still holds (currentAssignment), it reports the ranges the
// member still owns; partitions franz-go revoked are absent and not
// reported.
func (b *Balancer) JoinGroupMetadata(topics []string, currentAssignment map[string][]int32, generation int32) []byte {
	report, kept := Assignment{}, Assignment{}
	b.mu.Lock()
	for t, ps := range currentAssignment {
		for _, p := range ps {
			s := b.owned.Get(t, p)
			kept.set(t, p, s)
			if s.IsEmpty() {
				// franz-go holds a partition we have no ranges of
				// (it cannot come from our syncs): claim all of it,
				// so that nobody else is given what we may consume.
				s = keyrange.Full()
			}
			report.set(t, p, slices.Clone(s))
		}
	}
	// What franz-go no longer holds it revoked (and we drained) or lost:
	// a later sync giving the partition back must not add it again.
	b.owned = kept
	b.mu.Unlock()
	return encodeMetadata(topics, report, generation)
}

// ParseSyncAssignment implements kgo.GroupBalancer: it records the new
// assignment, calls OnSync and returns the partitions for franz-go, which
// revokes those no longer listed and keeps fetching the others.
func (b *Balancer) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	a, err := decodeAssignment(assignment)
	if err != nil {
		return nil, fmt.Errorf("sharing: sync: %w", err)
	}
	b.mu.Lock()
	owned := Assignment{}
	for t, ps := range a {
		for p, s := range ps {
			// A partition that stays keeps what it was shrunk out of
			// until Released; one that goes is revoked by franz-go,
			// which drains it before rejoining.
			owned.set(t, p, b.owned.Get(t, p).Union(s))
		}
	}
	b.owned = owned
	b.assigned = a
	b.mu.Unlock()
	if b.onSync != nil {
		b.onSync(a.Clone())
	}
	return topicPartitions(a), nil
}

// MemberBalancer implements kgo.GroupBalancer. It reads every member's
// metadata and fails if any cannot be read.
func (b *Balancer) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	cb, err := kgo.NewConsumerBalancer(planner{sharing: b.sharing}, members)
	if err != nil {
		return nil, nil, fmt.Errorf("sharing: %w", err)
	}
	if _, err := groupMembers(cb); err != nil {
		return nil, nil, err
	}
	return cb, cb.MemberTopics(), nil
}

// planner plans for kgo.ConsumerBalancer, which parses the standard
// consumer metadata for us and logs each member's interests.
type planner struct{ sharing bool }

func (pl planner) Balance(cb *kgo.ConsumerBalancer, topics map[string]int32) kgo.IntoSyncAssignment {
	members, err := groupMembers(cb)
	if err != nil {
		cb.SetError(err)
		return nil
	}
	return syncPlan(Plan(members, topics, pl.sharing))
}

func groupMembers(cb *kgo.ConsumerBalancer) ([]Member, error) {
	var members []Member
	var first error
	cb.EachMember(func(m *kmsg.JoinGroupResponseMember, meta *kmsg.ConsumerMemberMetadata) {
		mem, err := memberFromMetadata(m.MemberID, meta)
		if err != nil {
			first = cmp.Or(first, err)
			return
		}
		members = append(members, mem)
	})
	if first != nil {
		return nil, fmt.Errorf("sharing: %w", first)
	}
	return members, nil
}

// syncPlan is a Plan in the form SyncGroup sends it.
type syncPlan map[string]Assignment

func (p syncPlan) IntoSyncAssignment() []kmsg.SyncGroupRequestGroupAssignment {
	out := make([]kmsg.SyncGroupRequestGroupAssignment, 0, len(p))
	for _, id := range sortedKeys(p) {
		sa := kmsg.NewSyncGroupRequestGroupAssignment()
		sa.MemberID = id
		sa.MemberAssignment = encodeAssignment(p[id])
		out = append(out, sa)
	}
	return out
}
