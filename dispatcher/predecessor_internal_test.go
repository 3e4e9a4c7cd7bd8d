package dispatcher

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/nodes"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
	"github.com/keyhook/keyhook/webhooks"
)

// cuttableDialer dials brokers until cut, then closes what it dialed and
// refuses more: a client behind it can neither heartbeat nor leave, as a
// process killed with SIGKILL.
type cuttableDialer struct {
	cut   atomic.Bool
	mu    sync.Mutex
	conns []net.Conn
}

func (d *cuttableDialer) dial(ctx context.Context, network, host string) (net.Conn, error) {
	if d.cut.Load() {
		return nil, errors.New("cut")
	}
	c, err := (&net.Dialer{}).DialContext(ctx, network, host)
	if err == nil {
		d.mu.Lock()
		d.conns = append(d.conns, c)
		d.mu.Unlock()
	}
	return c, err
}

func (d *cuttableDialer) cutAll() {
	d.cut.Store(true)
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		_ = c.Close()
	}
}

// A node killed without leaving its reader group stays a member until its
// session times out, and the group coordinator holds the partitions for
// it meanwhile. The node restarted under the same id removes the member
// it remembered before joining: it owns the partitions again long before
// the dead member's session (a minute here) would have let them go, and
// remembers its own member for the next crash.
func TestARestartedNodeRemovesTheMemberItsCrashLeftInTheReaderGroup(t *testing.T) {
	testutil.KafkaTiers(t, 2, []string{"crashed"}, func(t *testing.T, brokers []string) {
		topic := "crashed"
		if t.Name() != "TestARestartedNodeRemovesTheMemberItsCrashLeftInTheReaderGroup/kfake" {
			topic = testutil.UniqueTopic("crashed")
			testutil.CreateTopics(t, brokers, 2, topic)
		}
		ctx := context.Background()
		rdb := testutil.StartRedis(t).Client()
		const node = "crash-node"
		members, err := nodes.NewMembers(rdb, "", node)
		if err != nil {
			t.Fatal(err)
		}
		group := readerGroupID([]string{topic})

		// The node before the crash: a member of the reader group with
		// both partitions, whose session and rebalance timeouts are a
		// minute, then cut off.
		var d cuttableDialer
		assigned := make(chan struct{}, 1)
		dead, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.SessionTimeout(time.Minute), kgo.RebalanceTimeout(time.Minute),
			kgo.Dialer(d.dial), kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) {
				select {
				case assigned <- struct{}{}:
				default:
				}
			}))
		if err != nil {
			t.Fatal(err)
		}
		pollCtx, stopPoll := context.WithCancel(ctx)
		go func() {
			for pollCtx.Err() == nil {
				dead.PollFetches(pollCtx)
			}
		}()
		select {
		case <-assigned:
		case <-time.After(30 * time.Second):
			t.Fatal("the first member was not assigned the partitions within 30 s")
		}
		deadMember, _ := dead.GroupMetadata()
		if err := members.Remember(ctx, group, deadMember); err != nil {
			t.Fatal(err)
		}
		d.cutAll()
		stopPoll()
		t.Cleanup(func() {
			gone, cancel := context.WithCancel(ctx)
			cancel()
			_ = dead.LeaveGroupContext(gone) // cut off: leave at once, without a word
			dead.Close()
		})

		sink := testutil.StartSink(t)
		tracker, err := tracking.New(rdb, tracking.Config{})
		if err != nil {
			t.Fatal(err)
		}
		sender, err := webhooks.NewClient(webhooks.ClientConfig{Policy: webhooks.AddressPolicy{AllowPrivate: true}, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		sub := &subscription.Subscription{ID: "crashed", Name: "crashed", Topics: []string{topic}, Endpoint: subscription.Endpoint{URL: sink.URL},
			Ordering: subscription.OrderKey, MaxInFlight: 16, Version: 1, DeadLetterTopic: subscription.DeadLetterNone}
		sub.Normalize()
		n, err := New(Config{NodeID: node, Brokers: brokers, Members: members,
			Tuning: Tuning{CommitInterval: 100 * time.Millisecond, SessionTimeout: 6 * time.Second, SharedRead: true},
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, fixedSubs{sub}, sender, tracker)
		if err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- n.Run(runCtx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("node stopped with error: %v", err)
			}
		})
		testutil.WaitFor(t, 30*time.Second, "the restarted node claims both partitions, before the dead member's minute ends", func() bool {
			claimed := 0
			for _, o := range n.Owned() {
				if o.Claimed {
					claimed++
				}
			}
			return claimed == 2
		})
		testutil.WaitFor(t, 10*time.Second, "the node remembers its own member of the reader group", func() bool {
			got, err := members.Member(ctx, group)
			return err == nil && got != "" && got != deadMember
		})
	})
}
