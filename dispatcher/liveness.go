package dispatcher

import (
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// liveness is what a group knows of its membership without asking: when
// the coordinator last answered one of the member's requests. A member the
// coordinator hears from keeps its partitions; one it has not heard from
// for a session timeout loses them, and another node may deliver them. A
// node cut from Kafka but not from Redis goes on writing its state, which
// renews its ownership lease (worker.leaseEnd), so the tracker's lease
// alone does not stop it: a delivery starts only while both hold.
//
// The coordinator heard the member at the latest when it answered, and at
// the earliest when the request was written, so the write of the last
// request answered is when its session was last renewed, as far as the
// node can prove. Its partitions cannot go to another node before that
// plus the session timeout; deliveries stop one heartbeat interval earlier
// (Config.lease), the same margin the tracker's lease keeps.
//
// It is a kgo hook: franz-go calls OnBrokerE2E after every round trip of
// the group's client, from its connection goroutines.
type liveness struct {
	// born is the monotonic time base of until; now reads the clock (a
	// test sets it).
	born time.Time
	now  func() time.Time
	// window is how long an answered round trip confirms the membership
	// for, from when it was written: Config.lease.
	window time.Duration
	// until is when the membership stops being confirmed, in ns since
	// born; 0 before the first answer.
	until atomic.Int64
	// lapsed is set while the node says it is unconfirmed: its lapse is
	// logged once, and its end.
	lapsed atomic.Bool
}

func newLiveness(window time.Duration, now func() time.Time) *liveness {
	if now == nil {
		now = time.Now
	}
	return &liveness{born: now(), now: now, window: window}
}

// OnBrokerE2E takes the answers that renew a member's session at the
// coordinator: heartbeats (KIP-848's too), joins and syncs. An answer carrying an error
// code (a member the coordinator no longer knows) renews it all the same;
// the session's end then comes as partitions lost, and a node that
// delivered them meanwhile is fenced by the new owner's epoch.
func (l *liveness) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	switch kmsg.Key(key) {
	case kmsg.Heartbeat, kmsg.JoinGroup, kmsg.SyncGroup, kmsg.ConsumerGroupHeartbeat:
	default:
		return
	}
	if e2e.Err() != nil {
		return
	}
	// The hook runs once the answer is read: the request was written its
	// round trip earlier.
	written := l.now().Add(-e2e.DurationE2E())
	end := int64(written.Sub(l.born) + l.window)
	for {
		cur := l.until.Load()
		if end <= cur || l.until.CompareAndSwap(cur, end) {
			return
		}
	}
}

// confirmedAt reports whether the membership is confirmed at now: a
// delivery of the group's partitions may start.
func (l *liveness) confirmedAt(now time.Time) bool {
	return int64(now.Sub(l.born)) < l.until.Load()
}

// check logs a lapse of the membership once, and its end, as a partition's
// tick sees them; ticks of many partitions may race, one of them logs.
func (l *liveness) check(log *slog.Logger, now time.Time) {
	ok := l.confirmedAt(now)
	if ok == !l.lapsed.Load() {
		return
	}
	if ok {
		if l.lapsed.CompareAndSwap(true, false) {
			log.Info("group membership confirmed again; deliveries resume")
		}
		return
	}
	if l.lapsed.CompareAndSwap(false, true) {
		log.Warn("group membership not confirmed: the coordinator answered no request sent in the last session timeout less a heartbeat; no delivery starts until it answers",
			"window", l.window)
	}
}

// confirmedUntil returns when the membership stops being confirmed, as of
// the answers so far; before the first answer, the time base.
func (l *liveness) confirmedUntil() time.Time {
	return l.born.Add(time.Duration(l.until.Load()))
}
