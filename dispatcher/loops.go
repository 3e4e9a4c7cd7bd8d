package dispatcher

import (
	"context"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/deadletter"
)

// countEvery is how often each group reads how many partitions its
// topics have, for the partitions.total gauge.
const countEvery = 30 * time.Second

// loops is the node's periodic work for every group running on it, one
// goroutine per kind of work instead of one per group: commits every
// CommitInterval, the topics' retention and partition count, and the
// redrive queues every RedriveInterval in one Redis round trip for all
// (one GET when nothing was queued since the last).
// An idle subscription then costs no goroutine of its own here. A group
// joins once it polls and leaves when it stops; leave returns once no
// loop works on the group any more, so its shutdown (the final commit,
// closing its client) never races one.
type loops struct {
	n *Node
	// joined wakes the topics loop to read a new group's topics at once.
	joined chan struct{}

	mu sync.Mutex
	// members are the groups running, guarded by mu.
	members map[*group]*member
	// version counts the joins and leaves, guarded by mu: a loop that
	// keeps its own view of the members rebuilds it only when it moved.
	version uint64
	// fresh are the members joined since the topics loop last looked,
	// guarded by mu.
	fresh []*member
	// period is how often each group commits (commitEvery), in
	// nanoseconds, as the commit loop last set it.
	period atomic.Int64
}

// member is one group's place in the loops.
type member struct {
	g *group
	// use is read-held by a loop working on the group; leave takes it to
	// wait them out, and sets left under it.
	use  sync.RWMutex
	left bool
	// committing is set while a commit of the group runs: a commit
	// slower than the interval is not piled upon.
	committing atomic.Bool
	// slice is the part of the commit interval the group commits in.
	slice int
}

func newLoops(n *Node) *loops {
	return &loops{n: n, joined: make(chan struct{}, 1), members: make(map[*group]*member)}
}

// join adds g to every loop.
func (l *loops) join(g *group) {
	m := &member{g: g, slice: commitSlice(g.sub.ID)}
	l.mu.Lock()
	l.members[g] = m
	l.fresh = append(l.fresh, m)
	l.version++
	l.mu.Unlock()
	select {
	case l.joined <- struct{}{}:
	default:
	}
}

// leave takes g out of every loop and returns once none works on it.
func (l *loops) leave(g *group) {
	l.mu.Lock()
	m := l.members[g]
	delete(l.members, g)
	l.version++
	l.mu.Unlock()
	if m == nil {
		return
	}
	m.use.Lock()
	m.left = true
	m.use.Unlock()
}

// snapshot returns the members now.
func (l *loops) snapshot() []*member {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]*member, 0, len(l.members))
	for _, m := range l.members {
		out = append(out, m)
	}
	return out
}

// redrivers returns the members that redrive, by subscription id, and
// the version they are of; ok is false, and nothing is built, when the
// members did not change since version since.
func (l *loops) redrivers(since uint64) (byID map[string]*member, version uint64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.version == since {
		return nil, since, false
	}
	byID = make(map[string]*member, len(l.members))
	for g, m := range l.members {
		if g.redriver != nil {
			byID[g.sub.ID] = m
		}
	}
	return byID, l.version, true
}

// with runs f on m's group unless it left; false if it did.
func (m *member) with(f func(g *group)) bool {
	m.use.RLock()
	defer m.use.RUnlock()
	if m.left {
		return false
	}
	f(m.g)
	return true
}

// run runs the loops until ctx ends, and returns once they all stopped.
func (l *loops) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { l.commitLoop(ctx) })
	wg.Go(func() { l.topicsLoop(ctx) })
	if l.n.cfg.Redrives != nil {
		wg.Go(func() { l.redriveLoop(ctx) })
	}
	wg.Wait()
}

// maxCommitsInFlight bounds the commits the node's groups run at once: a
// coordinator answers a connection's requests one at a time, so more
// would only queue there (committers.go), each holding a goroutine.
const maxCommitsInFlight = 64

// commitSlices is how many parts of the commit interval the groups'
// commits are spread over: a thousand cursors committing at one tick made
// a burst each second, of the node's CPU and of OffsetCommits at the
// coordinator, that the deliveries of that moment waited behind.
const commitSlices = 8

// commitSlice is the part of the commit interval subscription id's
// group commits in.
func commitSlice(id string) int {
	h := fnv.New32a()
	h.Write([]byte(id))
	return int(h.Sum32() % commitSlices)
}

// commitLoop commits every group's watermarks each commit period
// (commitEvery: CommitInterval, or longer when the node runs more groups
// than CommitRate allows commits in an interval), each group in its slice
// of the period (commitSlice). The groups with something to commit commit
// concurrently, up to maxCommitsInFlight, so a slow one delays no other;
// when commits take longer than the period allows, each group's commits
// come less often (the loop starts its next slice only once it found room
// for this one's).
func (l *loops) commitLoop(ctx context.Context) {
	tick := func(groups int) time.Duration {
		every := commitEvery(l.n.cfg.CommitInterval, l.n.cfg.CommitRate, groups)
		l.period.Store(int64(every))
		return max(every/commitSlices, time.Millisecond)
	}
	t := time.NewTimer(tick(0))
	defer t.Stop()
	var commits sync.WaitGroup
	defer commits.Wait()
	room := make(chan struct{}, maxCommitsInFlight)
	for slice := 0; ; slice = (slice + 1) % commitSlices {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ms := l.snapshot()
		t.Reset(tick(len(ms)))
		for _, m := range ms {
			if m.slice != slice || !m.g.hasCommit() || !m.committing.CompareAndSwap(false, true) {
				continue
			}
			select {
			case room <- struct{}{}:
			case <-ctx.Done():
				m.committing.Store(false)
				return
			}
			commits.Go(func() {
				defer func() { <-room }()
				defer m.committing.Store(false)
				m.with(func(g *group) { g.commit(g.snapshotWorkers()) })
			})
		}
	}
}

// commitPeriod is how often each group commits now.
func (l *loops) commitPeriod() time.Duration { return time.Duration(l.period.Load()) }

// commitEvery is how often each of a node's groups commits: the commit
// interval, or longer when the groups would commit more than rate times
// a second (rate 0: no bound). The node's OffsetCommits, what each costs
// it and the group coordinators, then stay bounded however many
// subscriptions it runs: a thousand cursors committing every second made
// a fifth of a node's CPU at five records a second, and most of the
// broker's.
func commitEvery(interval time.Duration, rate, groups int) time.Duration {
	if rate <= 0 || groups <= 0 {
		return interval
	}
	return max(interval, time.Duration(groups)*time.Second/time.Duration(rate))
}

// topicsLoop reads the retention of the node's topics every
// retentionRefresh and their partition counts every countEvery, once per
// topic however many groups read it (a thousand subscriptions on one
// topic cost one request, not a thousand), and hands each group those of
// its topics. A group that joins gets what is known of its topics at
// once, and those not known yet are read for it then.
func (l *loops) topicsLoop(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	topics := make(map[string]*topicInfo)
	var nextRetention, nextCount time.Time
	for {
		now := time.Now()
		l.mu.Lock()
		fresh := l.fresh
		l.fresh = nil
		l.mu.Unlock()
		retention, count := !now.Before(nextRetention), !now.Before(nextCount)
		switch {
		case retention || count:
			ms := l.snapshot()
			names := topicNames(ms, nil)
			if retention {
				l.readRetention(ctx, ms, topics, names)
				nextRetention = now.Add(retentionRefresh)
			}
			if count {
				l.countPartitions(ctx, ms, topics, names)
				nextCount = now.Add(countEvery)
			}
			for _, m := range ms {
				m.with(func(g *group) { g.learnTopics(topics) })
			}
		case len(fresh) > 0:
			unknown := topicNames(fresh, func(name string) bool { return topics[name] == nil })
			if len(unknown) > 0 {
				l.readRetention(ctx, fresh, topics, unknown)
				l.countPartitions(ctx, fresh, topics, unknown)
			}
			for _, m := range fresh {
				m.with(func(g *group) { g.learnTopics(topics) })
			}
		}
		t.Reset(time.Until(minTime(nextRetention, nextCount)))
		select {
		case <-ctx.Done():
			return
		case <-l.joined:
		case <-t.C:
		}
	}
}

// topicInfo is what the topics loop read of one topic; only that loop
// uses it.
type topicInfo struct {
	// retention is the topic's retention.ms, 0 when it has none or it
	// could not be read.
	retention time.Duration
	// partitions counts the topic's partitions, 0 until read.
	partitions int
}

// topicNames returns the topics the members' groups read, each once, of
// those keep says to (all when keep is nil).
func topicNames(ms []*member, keep func(string) bool) []string {
	seen := make(map[string]bool)
	var out []string
	for _, m := range ms {
		for _, name := range m.g.sub.Topics {
			if !seen[name] && (keep == nil || keep(name)) {
				seen[name] = true
				out = append(out, name)
			}
		}
	}
	return out
}

// withClient runs f with the Kafka client of one of ms's groups still
// running; false if none is.
func withClient(ms []*member, f func(cl *kgo.Client)) bool {
	for _, m := range ms {
		if m.with(func(g *group) { f(g.client()) }) {
			return true
		}
	}
	return false
}

// readRetention reads the retention of names into topics, in one request.
func (l *loops) readRetention(ctx context.Context, ms []*member, topics map[string]*topicInfo, names []string) {
	if len(names) == 0 {
		return
	}
	withClient(ms, func(cl *kgo.Client) {
		read, err := readRetention(ctx, cl, names)
		if err != nil {
			l.n.log.Warn("cannot read the topics' retention; the retention guard waits", "topics", len(names), "err", err)
			return
		}
		for _, name := range names {
			info(topics, name).retention = read[name]
		}
	})
}

// countPartitions reads the partition counts of names into topics, in
// one request.
func (l *loops) countPartitions(ctx context.Context, ms []*member, topics map[string]*topicInfo, names []string) {
	if len(names) == 0 {
		return
	}
	withClient(ms, func(cl *kgo.Client) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		md, err := kadm.NewClient(cl).Metadata(ctx, names...)
		if err != nil {
			return
		}
		for _, name := range names {
			n := 0
			if t, ok := md.Topics[name]; ok && t.Err == nil {
				n = len(t.Partitions)
			}
			info(topics, name).partitions = n
		}
	})
}

// info returns topics[name], added if missing.
func info(topics map[string]*topicInfo, name string) *topicInfo {
	ti := topics[name]
	if ti == nil {
		ti = &topicInfo{}
		topics[name] = ti
	}
	return ti
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// redriveFullEvery is how many redrive polls pass between two that list
// every group's queues whatever the count of pushes says: the safety net
// for a push whose count did not move (10 s at the default interval).
const redriveFullEvery = 40

// redriveLoop polls the redrive queues each RedriveInterval for every
// group that redrives, in one round trip, and has each group take those
// of its owned partitions. An idle node pays one GET a poll, and no walk
// over its groups: the queues are listed again only for the groups that
// had some queued at the last listing, those that joined since, and all
// of them when the count of pushes moved (a redrive queued on any node)
// or every redriveFullEvery polls. A group is polled only while something
// of it is queued or taken (active: a redriver takes only when polled).
func (l *loops) redriveLoop(ctx context.Context) {
	t := time.NewTicker(l.n.cfg.RedriveInterval)
	defer t.Stop()
	var (
		// version is the count of pushes at the last full listing.
		version string
		// queued holds, of the groups listed, those with something
		// queued; listed the groups listed since the last full listing.
		queued = make(map[string][]deadletter.Source)
		listed = make(map[string]bool)
		// byID are the groups that redrive, as of the members' version
		// seen; unlisted is set while some of them may not be listed yet.
		byID     map[string]*member
		seen     = ^uint64(0)
		unlisted bool
		// active are the groups whose redriver held something taken
		// after their last poll.
		active = make(map[string]bool)
	)
	for polls := 0; ; polls++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if m, v, changed := l.redrivers(seen); changed {
			byID, seen, unlisted = m, v, true
		}
		if len(byID) == 0 {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		v, err := l.n.cfg.Redrives.QueuedVersion(rctx)
		full := err == nil && (v != version || polls%redriveFullEvery == 0)
		var subs []string
		if err == nil {
			switch {
			case full || unlisted:
				for id := range byID {
					if full || !listed[id] || queued[id] != nil {
						subs = append(subs, id)
					}
				}
			default:
				for id := range queued {
					if byID[id] != nil {
						subs = append(subs, id)
					}
				}
			}
		}
		var got map[string][]deadletter.Source
		if len(subs) > 0 {
			got, err = l.n.cfg.Redrives.QueuedMany(rctx, subs)
		}
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				l.n.log.Warn("cannot list redrives; will retry", "err", err)
			}
			continue
		}
		if full {
			version = v
			clear(listed)
			clear(queued)
		}
		unlisted = false
		for _, id := range subs {
			listed[id] = true
			if src := got[id]; len(src) > 0 {
				queued[id] = src
			} else {
				delete(queued, id)
			}
		}
		for id := range queued {
			active[id] = true
		}
		for id := range active {
			m := byID[id]
			if m == nil {
				delete(active, id)
				continue
			}
			src := queued[id]
			if len(src) == 0 && m.g.redriver.idle() {
				delete(active, id)
				continue
			}
			m.with(func(g *group) { g.redriver.poll(ctx, src) })
			if len(queued[id]) == 0 && m.g.redriver.idle() {
				delete(active, id)
			}
		}
	}
}

// queuedSet indexes sources by partition.
func queuedSet(sources []deadletter.Source) map[topicPartition]bool {
	out := make(map[topicPartition]bool, len(sources))
	for _, s := range sources {
		out[topicPartition{s.Topic, s.Partition}] = true
	}
	return out
}
