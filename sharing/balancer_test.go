package sharing

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keyhook/keyhook/keyrange"
)

func newBalancer(t *testing.T, cfg Config) *Balancer {
	t.Helper()
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// syncTo feeds b the assignment a as the coordinator would.
func syncTo(t *testing.T, b *Balancer, a Assignment) map[string][]int32 {
	t.Helper()
	parts, err := b.ParseSyncAssignment(encodeAssignment(a))
	if err != nil {
		t.Fatal(err)
	}
	return parts
}

// owned is what b reports it owns when franz-go holds current.
func owned(t *testing.T, b *Balancer, current map[string][]int32) Assignment {
	t.Helper()
	m, err := decodeMetadata("me", b.JoinGroupMetadata([]string{"t"}, current, 4))
	if err != nil {
		t.Fatal(err)
	}
	return m.Owned
}

func TestBalancerReportsShrunkRangesUntilReleased(t *testing.T) {
	var syncs []Assignment
	b := newBalancer(t, Config{Sharing: true, OnSync: func(a Assignment) { syncs = append(syncs, a) }})

	current := syncTo(t, b, asg(t, "t/0=0-65536", "t/1=0-65536"))
	current = syncTo(t, b, asg(t, "t/0=0-32768", "t/1=0-65536"))
	if got, want := b.Assigned("t", 0), rs(t, "0-32768"); !got.Equal(want) {
		t.Errorf("Assigned = %v, want %v", got, want)
	}
	if diff := cmp.Diff(asg(t, "t/0=0-65536", "t/1=0-65536"), owned(t, b, current)); diff != "" {
		t.Errorf("before Released, owned (-want +got):\n%s", diff)
	}

	b.Released("t", 0, rs(t, "0-32768"))
	if diff := cmp.Diff(asg(t, "t/0=0-32768", "t/1=0-65536"), owned(t, b, current)); diff != "" {
		t.Errorf("after Released, owned (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]Assignment{asg(t, "t/0=0-65536", "t/1=0-65536"), asg(t, "t/0=0-32768", "t/1=0-65536")}, syncs); diff != "" {
		t.Errorf("OnSync calls (-want +got):\n%s", diff)
	}
}

func TestReleasedNeverGivesUpRangesOfTheLatestSync(t *testing.T) {
	b := newBalancer(t, Config{Sharing: true})
	current := syncTo(t, b, asg(t, "t/0=0-100,200-300"))
	syncTo(t, b, asg(t, "t/0=200-300"))
	// A late Released from before the sync, keeping less than it gave.
	b.Released("t", 0, rs(t, "250-300"))
	if diff := cmp.Diff(asg(t, "t/0=200-300"), owned(t, b, current)); diff != "" {
		t.Errorf("owned (-want +got):\n%s", diff)
	}
	b.Released("t", 9, rs(t, "0-1")) // not owned: nothing happens
}

func TestBalancerForgetsRevokedPartitionsAtSync(t *testing.T) {
	b := newBalancer(t, Config{Sharing: true})
	syncTo(t, b, asg(t, "t/0=0-65536", "t/1=0-65536"))
	current := syncTo(t, b, asg(t, "t/1=0-65536"))
	if got := b.Assigned("t", 0); got != nil {
		t.Errorf("Assigned of a revoked partition = %v, want nil", got)
	}
	if diff := cmp.Diff(map[string][]int32{"t": {1}}, current); diff != "" {
		t.Errorf("partitions for franz-go (-want +got):\n%s", diff)
	}
	// Given back later, it starts from what the new sync says.
	syncTo(t, b, asg(t, "t/0=0-10", "t/1=0-65536"))
	if diff := cmp.Diff(asg(t, "t/0=0-10", "t/1=0-65536"), owned(t, b, map[string][]int32{"t": {0, 1}})); diff != "" {
		t.Errorf("owned (-want +got):\n%s", diff)
	}
}

func TestBalancerReportsOnlyPartitionsFranzGoHolds(t *testing.T) {
	b := newBalancer(t, Config{Sharing: true})
	syncTo(t, b, asg(t, "t/0=0-10", "t/1=0-65536"))
	// franz-go dropped partition 1 (lost) and holds 2, which no sync of
	// ours gave: we claim all of 2 rather than nothing.
	got := owned(t, b, map[string][]int32{"t": {0, 2}})
	if diff := cmp.Diff(asg(t, "t/0=0-10", "t/2=0-65536"), got); diff != "" {
		t.Errorf("owned (-want +got):\n%s", diff)
	}
}

func TestBalancerForgetsPartitionsFranzGoNoLongerHolds(t *testing.T) {
	b := newBalancer(t, Config{Sharing: true})
	syncTo(t, b, asg(t, "t/0=0-65536"))
	// The session was lost: franz-go rejoins holding nothing.
	if got := owned(t, b, nil); len(got) != 0 {
		t.Errorf("owned after a lost session = %v, want nothing", got)
	}
	current := syncTo(t, b, asg(t, "t/0=0-10"))
	if diff := cmp.Diff(asg(t, "t/0=0-10"), owned(t, b, current)); diff != "" {
		t.Errorf("owned (-want +got):\n%s", diff)
	}
}

func TestParseSyncAssignmentRejectsMalformed(t *testing.T) {
	b := newBalancer(t, Config{OnSync: func(Assignment) { t.Error("OnSync called for a malformed assignment") }})
	asgn := kmsg.NewConsumerMemberAssignment()
	at := kmsg.NewConsumerMemberAssignmentTopic()
	at.Topic, at.Partitions = "t", []int32{0}
	asgn.Topics = append(asgn.Topics, at)
	asgn.UserData = []byte{1, 0}
	if _, err := b.ParseSyncAssignment(asgn.AppendTo(nil)); !errors.Is(err, ErrMalformed) {
		t.Errorf("err = %v, want ErrMalformed", err)
	}
}

// balance runs a rebalance as the leader's client does: MemberBalancer on
// the members' JoinGroup metadata, then the plan.
func balance(t *testing.T, leader *Balancer, members []kmsg.JoinGroupResponseMember, partitions map[string]int32) map[string][]byte {
	t.Helper()
	mb, topics, err := leader.MemberBalancer(members)
	if err != nil {
		t.Fatal(err)
	}
	for topic := range partitions {
		if _, ok := topics[topic]; !ok {
			t.Fatalf("topics %v miss %q", topics, topic)
		}
	}
	into, err := mb.(kgo.GroupMemberBalancerOrError).BalanceOrError(partitions)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, sa := range into.IntoSyncAssignment() {
		out[sa.MemberID] = sa.MemberAssignment
	}
	return out
}

func TestBalancersShareAPartitionThroughTheGroupProtocol(t *testing.T) {
	ids := []string{"a", "b", "c"}
	bals := map[string]*Balancer{}
	current := map[string]map[string][]int32{}
	for _, id := range ids {
		bals[id] = newBalancer(t, Config{Sharing: true})
	}
	for gen := int32(1); gen <= 3; gen++ {
		var members []kmsg.JoinGroupResponseMember
		for _, id := range ids {
			m := kmsg.NewJoinGroupResponseMember()
			m.MemberID = id
			m.ProtocolMetadata = bals[id].JoinGroupMetadata([]string{"t"}, current[id], gen-1)
			members = append(members, m)
		}
		for id, b := range balance(t, bals["a"], members, map[string]int32{"t": 1}) {
			parts, err := bals[id].ParseSyncAssignment(b)
			if err != nil {
				t.Fatal(err)
			}
			current[id] = parts
		}
	}
	var union keyrange.Set
	for i, id := range ids {
		got := bals[id].Assigned("t", 0)
		if want := (keyrange.Set{keyrange.Split(3)[i]}); !got.Equal(want) {
			t.Errorf("%s has %v, want %v", id, got, want)
		}
		union = union.Union(got)
	}
	if !union.IsFull() {
		t.Errorf("members cover %v, want the whole space", union)
	}
}

func TestMemberBalancerRejectsMalformedMetadata(t *testing.T) {
	b := newBalancer(t, Config{Sharing: true})
	good := kmsg.NewJoinGroupResponseMember()
	good.MemberID = "a"
	good.ProtocolMetadata = b.JoinGroupMetadata([]string{"t"}, nil, -1)

	meta := kmsg.NewConsumerMemberMetadata()
	meta.Version = 3
	meta.Topics = []string{"t"}
	meta.UserData = []byte{9}
	bad := kmsg.NewJoinGroupResponseMember()
	bad.MemberID = "b"
	bad.ProtocolMetadata = meta.AppendTo(nil)

	if _, _, err := b.MemberBalancer([]kmsg.JoinGroupResponseMember{good, bad}); !errors.Is(err, ErrMalformed) {
		t.Errorf("err = %v, want ErrMalformed", err)
	}
}
