package control

import (
	"context"
	"time"

	"github.com/keyhook/keyhook/nodes"
)

// NodeLister lists the live nodes and the partitions each owned at its
// last heartbeat; nodes.Registry implements it.
type NodeLister interface {
	List(ctx context.Context) ([]nodes.Info, error)
}

// stoppedSince reports whether every live node has said, in a heartbeat
// after since, that it owns no partition of the subscription. With the
// shared read (--shared-read) a subscription's consumer group has no
// member, so an empty group does not show that its cursors stopped; the
// nodes' own word does, in either mode.
func stoppedSince(ctx context.Context, ns NodeLister, subscriptionID string, since time.Time) (bool, error) {
	infos, err := ns.List(ctx)
	if err != nil {
		return false, err
	}
	for _, n := range infos {
		if !n.HeartbeatAt.After(since) {
			return false, nil
		}
		for _, o := range n.Owned {
			if o.Subscription == subscriptionID {
				return false, nil
			}
		}
	}
	return true, nil
}
