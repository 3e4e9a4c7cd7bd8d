package sharing

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keyhook/keyhook/keyrange"
)

// rs parses ranges as keyrange.Set.String writes them.
func rs(t testing.TB, s string) keyrange.Set {
	t.Helper()
	set, err := keyrange.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// asg builds an Assignment from "topic/partition=ranges" entries.
func asg(t testing.TB, entries ...string) Assignment {
	t.Helper()
	a := Assignment{}
	for _, e := range entries {
		tp, ranges, ok := strings.Cut(e, "=")
		topic, part, ok2 := strings.Cut(tp, "/")
		if !ok || !ok2 {
			t.Fatalf("bad entry %q", e)
		}
		var p int32
		if _, err := fmt.Sscan(part, &p); err != nil {
			t.Fatalf("bad entry %q: %v", e, err)
		}
		a.set(topic, p, rs(t, ranges))
	}
	return a
}

func splitString(k, i int) string { return keyrange.Set{keyrange.Split(k)[i]}.String() }

func fresh(ids []string, topics ...string) []Member {
	ms := make([]Member, len(ids))
	for i, id := range ids {
		ms[i] = Member{ID: id, Topics: topics}
	}
	return ms
}

func TestPlanSplitsOnePartitionEvenlyAmongMembers(t *testing.T) {
	for n := 1; n <= 5; n++ {
		t.Run(fmt.Sprintf("%d members", n), func(t *testing.T) {
			var ids []string
			want := map[string]Assignment{}
			for i := range n {
				id := fmt.Sprintf("m%d", i)
				ids = append(ids, id)
				want[id] = asg(t, "t/0="+splitString(n, i))
			}
			got := Plan(fresh(ids, "t"), map[string]int32{"t": 1}, true)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPlan(t *testing.T) {
	full := keyrange.Full().String()
	tests := []struct {
		name       string
		members    []Member
		partitions map[string]int32
		sharing    bool
		want       map[string]Assignment
	}{{
		name:       "eight partitions spread whole over three members",
		members:    fresh([]string{"a", "b", "c"}, "t"),
		partitions: map[string]int32{"t": 8},
		sharing:    true,
		want: map[string]Assignment{
			"a": asg(t, "t/0="+full, "t/3="+full, "t/6="+full),
			"b": asg(t, "t/1="+full, "t/4="+full, "t/7="+full),
			"c": asg(t, "t/2="+full, "t/5="+full),
		},
	}, {
		name:       "two partitions split three and two ways among five members",
		members:    fresh([]string{"a", "b", "c", "d", "e"}, "t"),
		partitions: map[string]int32{"t": 2},
		sharing:    true,
		want: map[string]Assignment{
			"a": asg(t, "t/0="+splitString(3, 0)),
			"b": asg(t, "t/0="+splitString(3, 1)),
			"c": asg(t, "t/0="+splitString(3, 2)),
			"d": asg(t, "t/1="+splitString(2, 0)),
			"e": asg(t, "t/1="+splitString(2, 1)),
		},
	}, {
		name:       "sharing off leaves members beyond the partitions idle",
		members:    fresh([]string{"a", "b", "c"}, "t"),
		partitions: map[string]int32{"t": 2},
		want: map[string]Assignment{
			"a": asg(t, "t/0="+full),
			"b": asg(t, "t/1="+full),
			"c": {},
		},
	}, {
		name: "members get only topics they want",
		members: []Member{
			{ID: "a", Topics: []string{"x", "y"}},
			{ID: "b", Topics: []string{"x"}},
			{ID: "c", Topics: []string{"x"}},
		},
		partitions: map[string]int32{"x": 1, "y": 1},
		sharing:    true,
		want: map[string]Assignment{
			"a": asg(t, "y/0="+full),
			"b": asg(t, "x/0="+splitString(2, 0)),
			"c": asg(t, "x/0="+splitString(2, 1)),
		},
	}, {
		name: "a topic nobody else wants goes to the member that wants it",
		members: []Member{
			{ID: "a", Topics: []string{"x"}},
			{ID: "b", Topics: []string{"x"}},
			{ID: "c", Topics: []string{"y"}},
		},
		partitions: map[string]int32{"x": 2, "y": 1},
		sharing:    true,
		want: map[string]Assignment{
			"a": asg(t, "x/0="+full),
			"b": asg(t, "x/1="+full),
			"c": asg(t, "y/0="+full),
		},
	}, {
		name: "a stale claim loses to a higher generation",
		members: []Member{
			{ID: "a", Topics: []string{"t"}, Generation: 3, Owned: asg(t, "t/0="+full)},
			{ID: "b", Topics: []string{"t"}, Generation: 5, Owned: asg(t, "t/0="+full)},
		},
		partitions: map[string]int32{"t": 1},
		want: map[string]Assignment{
			"a": {},
			"b": asg(t, "t/0="+full),
		},
	}, {
		name: "a stale claim keeps only what no newer claim took",
		members: []Member{
			{ID: "a", Topics: []string{"t"}, Generation: 3, Owned: asg(t, "t/0="+full)},
			{ID: "b", Topics: []string{"t"}, Generation: 5, Owned: asg(t, "t/0=0-32768")},
		},
		partitions: map[string]int32{"t": 1},
		sharing:    true,
		want: map[string]Assignment{
			"a": asg(t, "t/0=32768-65536"),
			"b": asg(t, "t/0=0-32768"),
		},
	}, {
		name: "a newcomer waits while the owner shrinks in place",
		members: []Member{
			{ID: "a", Topics: []string{"t"}, Generation: 1},
			{ID: "b", Topics: []string{"t"}, Generation: 1, Owned: asg(t, "t/0="+full)},
		},
		partitions: map[string]int32{"t": 1},
		sharing:    true,
		want: map[string]Assignment{
			"a": {},
			"b": asg(t, "t/0=0-32768"),
		},
	}, {
		name: "a newcomer gets the ranges once released",
		members: []Member{
			{ID: "a", Topics: []string{"t"}, Generation: 2},
			{ID: "b", Topics: []string{"t"}, Generation: 2, Owned: asg(t, "t/0=0-32768")},
		},
		partitions: map[string]int32{"t": 1},
		sharing:    true,
		want: map[string]Assignment{
			"a": asg(t, "t/0=32768-65536"),
			"b": asg(t, "t/0=0-32768"),
		},
	}, {
		name: "a member whose share grows gets nothing for a generation",
		members: []Member{
			{ID: "b", Topics: []string{"t"}, Generation: 2, Owned: asg(t, "t/0=0-32768")},
		},
		partitions: map[string]int32{"t": 1},
		sharing:    true,
		want:       map[string]Assignment{"b": {}},
	}, {
		name: "ownership of departed members is free at once",
		members: []Member{
			{ID: "b", Topics: []string{"t"}, Generation: 2},
		},
		partitions: map[string]int32{"t": 1},
		sharing:    true,
		want:       map[string]Assignment{"b": asg(t, "t/0="+full)},
	}, {
		name: "whole partitions stick to their owners",
		members: []Member{
			{ID: "a", Topics: []string{"t"}, Generation: 4, Owned: asg(t, "t/2="+full)},
			{ID: "b", Topics: []string{"t"}, Generation: 4, Owned: asg(t, "t/0="+full)},
			{ID: "c", Topics: []string{"t"}, Generation: 4, Owned: asg(t, "t/1="+full)},
		},
		partitions: map[string]int32{"t": 3},
		want: map[string]Assignment{
			"a": asg(t, "t/2="+full),
			"b": asg(t, "t/0="+full),
			"c": asg(t, "t/1="+full),
		},
	}, {
		name: "repeated member IDs count once",
		members: []Member{
			{ID: "a", Topics: []string{"t"}},
			{ID: "a", Topics: []string{"t"}},
		},
		partitions: map[string]int32{"t": 1},
		sharing:    true,
		want:       map[string]Assignment{"a": asg(t, "t/0="+full)},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Plan(tt.members, tt.partitions, tt.sharing)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

// group simulates a group generation by generation: every member reports
// what it owns, the leader plans, every member syncs, and shrinks and
// revokes complete before the next generation.
type group struct {
	t          *testing.T
	partitions map[string]int32
	sharing    bool
	topics     []string
	ids        []string
	owned      map[string]Assignment
	gen        int32
}

func newGroup(t *testing.T, partitions map[string]int32, sharing bool) *group {
	var topics []string
	for topic := range partitions {
		topics = append(topics, topic)
	}
	slices.Sort(topics)
	return &group{t: t, partitions: partitions, sharing: sharing, topics: topics, owned: map[string]Assignment{}}
}

func (g *group) join(id string) {
	g.ids = append(g.ids, id)
	slices.Sort(g.ids)
}

func (g *group) leave(id string) {
	g.ids = slices.DeleteFunc(g.ids, func(s string) bool { return s == id })
	delete(g.owned, id)
}

func (g *group) members() []Member {
	ms := make([]Member, len(g.ids))
	for i, id := range g.ids {
		ms[i] = Member{ID: id, Topics: g.topics, Owned: g.owned[id].Clone(), Generation: g.gen}
	}
	return ms
}

// step runs one generation and returns its plan. It fails the test if a
// hash is assigned to two members, or owned by two members between the
// sync and the end of the shrinks.
func (g *group) step() map[string]Assignment {
	g.t.Helper()
	g.gen++
	plan := Plan(g.members(), g.partitions, g.sharing)
	if err := disjoint(plan); err != nil {
		g.t.Fatalf("generation %d: assigned twice: %v\n%v", g.gen, err, plan)
	}
	// Right after the sync a member owns what it owned of the partitions
	// it keeps plus what it got; franz-go revoked the rest.
	held := map[string]Assignment{}
	for id, a := range plan {
		h := Assignment{}
		for topic, ps := range a {
			for p, s := range ps {
				h.set(topic, p, g.owned[id].Get(topic, p).Union(s))
			}
		}
		held[id] = h
	}
	if err := disjoint(held); err != nil {
		g.t.Fatalf("generation %d: owned twice: %v\nowned before: %v\nplan: %v", g.gen, err, g.owned, plan)
	}
	for id, a := range plan {
		g.owned[id] = a.Clone()
	}
	return plan
}

// settle steps until the plan is the even target and a fixed point, and
// returns the number of generations it took; it fails after limit.
func (g *group) settle(limit int) int {
	g.t.Helper()
	for n := 1; n <= limit; n++ {
		plan := g.step()
		if err := g.even(plan); err != nil {
			continue
		}
		again := Plan(g.members(), g.partitions, g.sharing)
		if diff := cmp.Diff(plan, again); diff != "" {
			g.t.Fatalf("generation %d: settled plan is not a fixed point (-settled +again):\n%s", g.gen, diff)
		}
		return n
	}
	g.t.Fatalf("not settled after %d generations: %v", limit, g.owned)
	return 0
}

// even checks the plan against the target of rule 1: every partition
// covered by k_p members whose shares have the sizes of Split(k_p), every
// member with ⌊U/N⌋ or ⌈U/N⌉ slots.
func (g *group) even(plan map[string]Assignment) error {
	n := len(g.ids)
	var parts []tp
	for _, topic := range g.topics {
		for p := range g.partitions[topic] {
			parts = append(parts, tp{topic, p})
		}
	}
	units := 0
	for idx, p := range parts {
		k := 1
		if g.sharing && n > len(parts) {
			k = n / len(parts)
			if idx < n%len(parts) {
				k++
			}
		}
		units += k
		var sizes, want []uint32
		var union keyrange.Set
		for _, a := range plan {
			if s := a.Get(p.topic, p.partition); !s.IsEmpty() {
				sizes = append(sizes, s.Len())
				union = union.Union(s)
			}
		}
		for _, r := range keyrange.Split(k) {
			want = append(want, r.Len())
		}
		slices.Sort(sizes)
		slices.Sort(want)
		if !union.IsFull() || !slices.Equal(sizes, want) {
			return fmt.Errorf("%s/%d: shares %v, want %v covering the space", p.topic, p.partition, sizes, want)
		}
	}
	for id, a := range plan {
		slots := 0
		for _, ps := range a {
			slots += len(ps)
		}
		if slots < units/n || slots > (units+n-1)/n {
			return fmt.Errorf("%s has %d slots of %d among %d", id, slots, units, n)
		}
	}
	return nil
}

// disjoint reports a hash of a partition in two members' assignments.
func disjoint(as map[string]Assignment) error {
	seen := map[tp]keyrange.Set{}
	for _, id := range sortedKeys(as) {
		for topic, ps := range as[id] {
			for p, s := range ps {
				k := tp{topic, p}
				if seen[k].Overlaps(s) {
					return fmt.Errorf("%s/%d: %s of %s is taken", topic, p, s.Intersect(seen[k]), id)
				}
				seen[k] = seen[k].Union(s)
			}
		}
	}
	return nil
}

func TestPlanScaleOutAndInSettlesWithoutDoubleOwnership(t *testing.T) {
	for _, tc := range []struct {
		partitions int32
		sharing    bool
	}{{1, true}, {2, true}, {3, true}, {1, false}, {3, false}} {
		t.Run(fmt.Sprintf("%d partitions sharing %v", tc.partitions, tc.sharing), func(t *testing.T) {
			g := newGroup(t, map[string]int32{"t": tc.partitions}, tc.sharing)
			ids := []string{"m1", "m2", "m3", "m4", "m5", "m6"}
			var gens []int
			for _, id := range ids {
				g.join(id)
				gens = append(gens, g.settle(2))
			}
			for _, id := range []string{"m2", "m5", "m1", "m6", "m3"} {
				g.leave(id)
				gens = append(gens, g.settle(2))
			}
			t.Logf("generations to settle per change: %v", gens)
		})
	}
}

func TestPlanScaleOutShrinksExistingMembersOnly(t *testing.T) {
	for _, parts := range []int32{1, 2, 3} {
		for n := int(parts); n <= 12; n++ {
			t.Run(fmt.Sprintf("%d partitions %d to %d members", parts, n, n+1), func(t *testing.T) {
				g := newGroup(t, map[string]int32{"t": parts}, true)
				for i := range n {
					g.join(fmt.Sprintf("m%02d", i))
				}
				g.settle(3)
				before := map[string]Assignment{}
				for id, a := range g.owned {
					before[id] = a.Clone()
				}
				g.join("new")
				plan := g.step()
				for id, old := range before {
					for topic, ps := range old {
						for p, s := range ps {
							got := plan[id].Get(topic, p)
							if got.IsEmpty() || !s.Covers(got) {
								t.Errorf("%s on %s/%d: had %s, got %q: want a shrink in place", id, topic, p, s, got)
							}
						}
					}
				}
				if gens := g.settle(2); gens != 1 {
					t.Errorf("settled %d generations after the shrink, want 1", gens)
				}
			})
		}
	}
}

func TestPlanOfSettledGroupIsAFixedPoint(t *testing.T) {
	for _, tc := range []struct {
		members    int
		partitions map[string]int32
		sharing    bool
	}{
		{5, map[string]int32{"t": 1}, true},
		{5, map[string]int32{"t": 2}, true},
		{3, map[string]int32{"t": 8}, true},
		{7, map[string]int32{"a": 2, "b": 3}, true},
		{4, map[string]int32{"a": 2, "b": 3}, false},
	} {
		t.Run(fmt.Sprintf("%d members %v sharing %v", tc.members, tc.partitions, tc.sharing), func(t *testing.T) {
			g := newGroup(t, tc.partitions, tc.sharing)
			for i := range tc.members {
				g.join(fmt.Sprintf("m%d", i))
			}
			if gens := g.settle(1); gens != 1 {
				t.Fatalf("a fresh group settled in %d generations, want 1", gens)
			}
			for range 3 {
				before := map[string]Assignment{}
				for id, a := range g.owned {
					before[id] = a.Clone()
				}
				if diff := cmp.Diff(before, g.step()); diff != "" {
					t.Fatalf("settled group moved (-before +after):\n%s", diff)
				}
			}
		})
	}
}

func TestPlanIsDeterministic(t *testing.T) {
	members := []Member{
		{ID: "a", Topics: []string{"x", "y", "z"}, Generation: 4, Owned: asg(t, "x/0=0-40000", "y/1=0-65536", "z/2=5-9")},
		{ID: "b", Topics: []string{"x", "y"}, Generation: 3, Owned: asg(t, "x/0=30000-65536", "y/0=0-65536")},
		{ID: "c", Topics: []string{"z"}, Generation: 4, Owned: asg(t, "z/0=0-65536", "z/1=0-100")},
		{ID: "d", Topics: []string{"x", "z"}},
		{ID: "e", Topics: []string{"x", "y", "z"}},
	}
	partitions := map[string]int32{"x": 1, "y": 2, "z": 3}
	first := Plan(members, partitions, true)
	for range 50 {
		if diff := cmp.Diff(first, Plan(members, partitions, true)); diff != "" {
			t.Fatalf("plans differ (-first +again):\n%s", diff)
		}
	}
}
