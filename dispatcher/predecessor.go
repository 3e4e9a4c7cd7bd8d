package dispatcher

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// MemberMemory remembers the member id this node last joined a consumer
// group as (nodes.Members), so that the node restarted after a crash can
// remove the member it left behind.
type MemberMemory interface {
	Member(ctx context.Context, group string) (string, error)
	Remember(ctx context.Context, group, member string) error
}

// predecessorTimeout bounds the removal of a crashed predecessor: the
// reader joins after it either way, and a removal that fails costs only
// the wait for the dead member's session timeout, as before.
const predecessorTimeout = 3 * time.Second

// memberRefresh is how often a reader writes its member id again while it
// does not change, well within nodes.MemberTTL.
const memberRefresh = 10 * time.Minute

// removePredecessor removes from group the member this node remembers
// joining it as. A node killed without leaving stays a member until its
// session times out, and the coordinator holds the group's rebalance for
// it meanwhile: the node restarted under the same id got its partitions
// back a session timeout after the crash. Member ids are unique to a
// client, so one that left already is refused (UNKNOWN_MEMBER_ID) and no
// other member is touched. n.readersMu is held: the reader joins after.
func (n *Node) removePredecessor(group string, log *slog.Logger) {
	mem := n.cfg.Members
	if mem == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), predecessorTimeout)
	defer cancel()
	prev, err := mem.Member(ctx, group)
	if err != nil {
		log.Warn("could not read the member this node last joined the reader group as; if it crashed, its partitions wait for its session timeout", "err", err)
		return
	}
	if prev == "" {
		return
	}
	cl, err := n.adminClientLocked()
	if err == nil {
		err = leaveAs(ctx, cl, group, prev)
	}
	switch {
	case errors.Is(err, kerr.UnknownMemberID):
		// It left, or its session ended: nothing to do.
	case err != nil:
		log.Warn("could not remove the member this node left in the reader group; if it crashed, its partitions wait for its session timeout", "member", prev, "err", err)
	default:
		log.Info("removed the member this node left in the reader group: it had not left (the node crashed or was killed)", "member", prev)
	}
}

// leaveAs has member leave group, sent through cl, a client outside it.
func leaveAs(ctx context.Context, cl kmsg.Requestor, group, member string) error {
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = group
	req.MemberID = member // before v3, the member leaving
	m := kmsg.NewLeaveGroupRequestMember()
	m.MemberID = member
	reason := "keyhook: the node restarted"
	m.Reason = &reason
	req.Members = append(req.Members, m)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return err
	}
	for _, m := range resp.Members {
		if err := kerr.ErrorForCode(m.ErrorCode); err != nil {
			return err
		}
	}
	return nil
}

// rememberMember writes the member id the reader group knows this node
// as, when it changed and every memberRefresh. The committer calls it,
// and owns member, memberAt and memberFailing.
func (r *reader) rememberMember(ctx context.Context) {
	mem := r.n.cfg.Members
	if mem == nil {
		return
	}
	id, _ := r.client().GroupMetadata()
	if id == "" || id == r.member && time.Since(r.memberAt) < memberRefresh {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, flushTimeout)
	defer cancel()
	if err := mem.Remember(wctx, r.groupID, id); err != nil {
		if !r.memberFailing && ctx.Err() == nil {
			r.memberFailing = true
			r.log.Warn("could not remember this node's member of the reader group; restarted after a crash, it waits for that member's session timeout", "err", err)
		}
		return
	}
	r.member, r.memberAt, r.memberFailing = id, time.Now(), false
}
