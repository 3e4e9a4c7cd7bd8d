package control

import (
	"context"
	"testing"
	"time"

	"github.com/keyhook/keyhook/nodes"
)

type nodeList []nodes.Info

func (l nodeList) List(context.Context) ([]nodes.Info, error) { return l, nil }

// A seek or a cleanup goes on only once every live node said, after the
// wait began, that it owns nothing of the subscription: with the shared
// read an empty consumer group proves nothing.
func TestStoppedOnlyOnceEveryNodeSaidSoAfterTheWaitBegan(t *testing.T) {
	since := time.Now()
	before, after := since.Add(-time.Second), since.Add(time.Second)
	owns := []nodes.Ownership{{Subscription: "s1", Topic: "t", Partition: 0}}
	for _, c := range []struct {
		name  string
		nodes nodeList
		want  bool
	}{
		{"no node", nil, true},
		{"a heartbeat from before the wait", nodeList{{ID: "a", HeartbeatAt: before}}, false},
		{"a node still owning a partition", nodeList{{ID: "a", HeartbeatAt: after, Owned: owns}}, false},
		{"a node owning another subscription's", nodeList{{ID: "a", HeartbeatAt: after, Owned: []nodes.Ownership{{Subscription: "s2"}}}}, true},
		{"one of two not heard from since", nodeList{{ID: "a", HeartbeatAt: after}, {ID: "b", HeartbeatAt: before}}, false},
	} {
		got, err := stoppedSince(context.Background(), c.nodes, "s1", since)
		if err != nil || got != c.want {
			t.Errorf("%s: stopped %v (err %v), want %v", c.name, got, err, c.want)
		}
	}
}
