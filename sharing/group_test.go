package sharing_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/keyrange"
	"github.com/keyhook/keyhook/sharing"
)

// settleTimeout bounds one change of membership: a few rebalances, on a
// real broker with its initial rebalance delay.
const settleTimeout = 60 * time.Second

// sharer is a group member as the dispatcher will run it: a client with
// the Balancer, a loop that polls, and a loop that answers shrinks with
// Released and ForceRebalance (nothing is in flight here, so a shrink is
// drained at once).
type sharer struct {
	name    string
	cl      *kgo.Client
	bal     *sharing.Balancer
	fetched atomic.Int64

	mu     sync.Mutex
	latest sharing.Assignment
	synced chan struct{} // one slot: syncs coalesce, the latest wins

	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

func startSharer(t *testing.T, name string, brokers []string, group, topic string) *sharer {
	t.Helper()
	s := &sharer{name: name, synced: make(chan struct{}, 1)}
	bal, err := sharing.New(sharing.Config{Sharing: true, OnSync: s.onSync})
	if err != nil {
		t.Fatal(err)
	}
	s.bal = bal
	s.cl, err = kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.Balancers(bal),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.HeartbeatInterval(100*time.Millisecond),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.ClientID(name),
	)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.wg.Add(2)
	go s.poll(ctx)
	go s.release(ctx)
	t.Cleanup(s.stop)
	return s
}

// onSync must not block: it runs on the client's group goroutine.
func (s *sharer) onSync(a sharing.Assignment) {
	s.mu.Lock()
	s.latest = a
	s.mu.Unlock()
	select {
	case s.synced <- struct{}{}:
	default:
	}
}

func (s *sharer) release(ctx context.Context) {
	defer s.wg.Done()
	var prev sharing.Assignment
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.synced:
		}
		s.mu.Lock()
		a := s.latest
		s.mu.Unlock()
		shrunk := false
		for topic, ps := range a {
			for p, ranges := range ps {
				if old := prev.Get(topic, p); old != nil && !old.Equal(ranges) {
					s.bal.Released(topic, p, ranges)
					shrunk = true
				}
			}
		}
		prev = a
		if shrunk {
			s.cl.ForceRebalance()
		}
	}
}

func (s *sharer) poll(ctx context.Context) {
	defer s.wg.Done()
	for ctx.Err() == nil {
		fs := s.cl.PollFetches(ctx)
		s.fetched.Add(int64(fs.NumRecords()))
	}
}

// stop leaves the group.
func (s *sharer) stop() {
	s.once.Do(func() {
		s.cancel()
		s.wg.Wait()
		s.cl.Close()
	})
}

// waitShared waits until the sharers' ranges of the partition are
// disjoint, none empty, and cover the whole space, and every sharer has
// fetched records.
func waitShared(t *testing.T, topic string, sharers ...*sharer) {
	t.Helper()
	start := time.Now()
	var last error
	for time.Since(start) < settleTimeout {
		if last = shared(topic, sharers); last == nil {
			t.Logf("%d members share %s/0 after %v", len(sharers), topic, time.Since(start).Round(time.Millisecond))
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("not shared after %v: %v", settleTimeout, last)
}

func shared(topic string, sharers []*sharer) error {
	var union keyrange.Set
	for _, s := range sharers {
		got := s.bal.Assigned(topic, 0)
		switch {
		case got.IsEmpty():
			return fmt.Errorf("%s has nothing", s.name)
		case union.Overlaps(got):
			return fmt.Errorf("%s has %v, which others have too", s.name, got.Intersect(union))
		case s.fetched.Load() == 0:
			return fmt.Errorf("%s fetched nothing", s.name)
		}
		union = union.Union(got)
	}
	if !union.IsFull() {
		return fmt.Errorf("members cover %v", union)
	}
	return nil
}

func produce(t *testing.T, brokers []string, topic string, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "key-%d", i), Partition: 0})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func TestMembersShareOnePartitionAsTheGroupGrowsAndShrinks(t *testing.T) {
	topic := testutil.UniqueTopic("sharing")
	testutil.KafkaTiers(t, 1, []string{topic}, func(t *testing.T, brokers []string) {
		group := testutil.UniqueTopic("sharing-group")
		produce(t, brokers, topic, 200)

		a := startSharer(t, "a", brokers, group, topic)
		waitShared(t, topic, a)
		if got := a.bal.Assigned(topic, 0); !got.IsFull() {
			t.Fatalf("a alone has %v, want the whole partition", got)
		}

		b := startSharer(t, "b", brokers, group, topic)
		c := startSharer(t, "c", brokers, group, topic)
		waitShared(t, topic, a, b, c)

		a.stop()
		waitShared(t, topic, b, c)
		for _, s := range []*sharer{b, c} {
			if got := s.bal.Assigned(topic, 0).Len(); got != keyrange.Space/2 {
				t.Errorf("%s has %d hashes, want half the space", s.name, got)
			}
		}
	})
}
