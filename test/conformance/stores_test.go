package conformance

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/keyhook/keyhook/auth"
	"github.com/keyhook/keyhook/connect"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/nodes"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
	"github.com/keyhook/keyhook/tracking/offsets"
)

// keyhookACL is the least privilege the deploy documentation gives
// keyhook: its own keys and channels, every command but the dangerous
// ones.
var keyhookACL = []any{"~keyhook:*", "&keyhook:*", "+@all", "-@dangerous"}

// topologies are the Redis deployments keyhook supports, each as the
// connect.RedisConfig a node would be started with.
var topologies = []struct {
	name  string
	start func(t *testing.T) connect.RedisConfig
}{
	{"single", func(t *testing.T) connect.RedisConfig {
		return connect.RedisConfig{URL: testutil.StartRedis(t).URL()}
	}},
	{"cluster", func(t *testing.T) connect.RedisConfig {
		c := testutil.StartRedisCluster(t, 3)
		return connect.RedisConfig{URL: "redis://" + c.Addrs[0] + "/0", Cluster: true, Addrs: c.Addrs}
	}},
	{"sentinel", func(t *testing.T) connect.RedisConfig {
		primary := testutil.StartRedis(t)
		sentinel := testutil.StartRedisSentinel(t, "keyhook-primary", primary.Addr)
		return connect.RedisConfig{URL: "redis://" + sentinel + "/0", SentinelMaster: "keyhook-primary"}
	}},
	{"acl user", func(t *testing.T) connect.RedisConfig {
		srv := testutil.StartRedis(t)
		admin := srv.Client()
		ctx := context.Background()
		if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", "keyhook", "on", ">s3cret"}, keyhookACL...)...).Err(); err != nil {
			t.Fatalf("ACL SETUSER keyhook: %v", err)
		}
		// From here on only named users get in.
		if err := admin.Do(ctx, "ACL", "SETUSER", "default", "off").Err(); err != nil {
			t.Fatalf("ACL SETUSER default off: %v", err)
		}
		return connect.RedisConfig{URL: "redis://keyhook:s3cret@" + srv.Addr + "/0"}
	}},
}

// storeBehaviours is what every store must do on every topology.
var storeBehaviours = []struct {
	name string
	run  func(t *testing.T, ctx context.Context, rdb redis.UniversalClient)
}{
	{"tracking: a takeover sees the acked ranges and fences the old owner", trackingTakeover},
	{"tracking: deleting a subscription deletes every partition's state", trackingDelete},
	{"subscription: the change feed announces a create, an update and a delete", subscriptionFeed},
	{"subscription: an update with a stale version is refused", subscriptionStaleUpdate},
	{"auth: a token authenticates until revoked", authLifecycle},
	{"nodes: a running node is listed with what it owns, and removed when it stops", nodesRegistry},
}

func TestStoresOnEveryRedisTopology(t *testing.T) {
	for _, topo := range topologies {
		t.Run(topo.name, func(t *testing.T) {
			cfg := topo.start(t)
			rdb, err := connect.NewRedis(cfg)
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			t.Cleanup(func() { _ = rdb.Close() })
			for _, b := range storeBehaviours {
				t.Run(b.name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					b.run(t, ctx, rdb)
				})
			}
		})
	}
}

// partitions spans enough hash tags that on a cluster every node holds
// some of a subscription's state.
const partitions = 16

func partitionKeys(sub string) []tracking.PartitionKey {
	pks := make([]tracking.PartitionKey, partitions)
	for p := range pks {
		pks[p] = tracking.PartitionKey{Subscription: sub, Topic: "orders", Partition: int32(p)}
	}
	return pks
}

func trackingTakeover(t *testing.T, ctx context.Context, rdb redis.UniversalClient) {
	store, err := tracking.New(rdb, tracking.Config{})
	if err != nil {
		t.Fatal(err)
	}
	want := []offsets.Range{{Start: 12, End: 15}, {Start: 20, End: 21}}
	for _, pk := range partitionKeys("takeover") {
		old, err := store.ClaimRanges(ctx, pk, "node-a", 1, "", nil)
		if err != nil {
			t.Fatalf("claim %s: %v", pk, err)
		}
		acked := new(offsets.Set)
		for _, r := range want {
			acked.Add(r.Start, r.End)
		}
		if err := store.FlushRanges(ctx, []tracking.PartitionFlush{{Key: pk, Flush: tracking.Flush{Epoch: old.Epoch, Acked: acked, Watermark: 10, Fetched: 21, Committed: 10}}})[0].Err; err != nil {
			t.Fatalf("flush %s: %v", pk, err)
		}
		// node-a dies without releasing; node-b takes over.
		claim, err := store.ClaimRanges(ctx, pk, "node-b", 2, "", nil)
		if err != nil {
			t.Fatalf("takeover %s: %v", pk, err)
		}
		if diff := cmp.Diff(want, claim.Acked.Ranges()); diff != "" {
			t.Fatalf("acked ranges the new owner of %s sees (-want +got):\n%s", pk, diff)
		}
		zombie := new(offsets.Set)
		zombie.Add(15, 20)
		err = store.FlushRanges(ctx, []tracking.PartitionFlush{{Key: pk, Flush: tracking.Flush{Epoch: old.Epoch, Acked: zombie, Watermark: 21, Fetched: 21, Committed: 21}}})[0].Err
		if !errors.Is(err, tracking.ErrFenced) {
			t.Fatalf("flush by the old owner of %s = %v, want tracking.ErrFenced", pk, err)
		}
	}
	states, err := store.Load(ctx, partitionKeys("takeover"))
	if err != nil {
		t.Fatal(err)
	}
	for pk, st := range states {
		if st.Owner != "node-b" || !cmp.Equal(want, st.AckedRanges) {
			t.Fatalf("state of %s after the zombie's flush: owner %q, acked %v; want node-b and %v", pk, st.Owner, st.AckedRanges, want)
		}
	}
}

func trackingDelete(t *testing.T, ctx context.Context, rdb redis.UniversalClient) {
	store, err := tracking.New(rdb, tracking.Config{})
	if err != nil {
		t.Fatal(err)
	}
	pks := partitionKeys("deleted")
	for _, pk := range pks {
		c, err := store.ClaimRanges(ctx, pk, "node-a", 1, "", nil)
		if err != nil {
			t.Fatalf("claim %s: %v", pk, err)
		}
		if err := store.ReleaseMany(ctx, []tracking.PartitionRelease{{Key: pk, Epoch: c.Epoch}})[0]; err != nil {
			t.Fatalf("release %s: %v", pk, err)
		}
	}
	if st, err := store.Load(ctx, pks); err != nil || len(st) != len(pks) {
		t.Fatalf("load before delete = %d partitions, %v; want %d", len(st), err, len(pks))
	}
	if err := store.DeleteSubscription(ctx, "deleted"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if st, err := store.Load(ctx, pks); err != nil || len(st) != 0 {
		t.Fatalf("load after delete = %d partitions, %v; want none", len(st), err)
	}
}

func newSubscription(name string) *subscription.Subscription {
	return &subscription.Subscription{Name: name, Topics: []string{"orders"}, Endpoint: subscription.Endpoint{URL: "https://example.com/hook"}}
}

func subscriptionFeed(t *testing.T, ctx context.Context, rdb redis.UniversalClient) {
	subs, err := subscription.New(rdb, subscription.Config{})
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan []*subscription.Subscription, 64)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		// A resync far away: only the change feed can announce in time.
		done <- subs.Watch(wctx, time.Hour, func(s []*subscription.Subscription) { seen <- s })
	}()
	defer func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("watch: %v", err)
		}
	}()
	awaitSet := func(what string, ok func([]*subscription.Subscription) bool) {
		t.Helper()
		for {
			select {
			case s := <-seen:
				if ok(s) {
					return
				}
			case <-ctx.Done():
				t.Fatalf("the change feed never announced %s", what)
			}
		}
	}
	awaitSet("the first set", func([]*subscription.Subscription) bool { return true })
	sub := newSubscription("feed")
	if err := subs.Create(ctx, sub); err != nil {
		t.Fatalf("create: %v", err)
	}
	find := func(s []*subscription.Subscription) *subscription.Subscription {
		if i := slices.IndexFunc(s, func(x *subscription.Subscription) bool { return x.ID == sub.ID }); i >= 0 {
			return s[i]
		}
		return nil
	}
	awaitSet("the create", func(s []*subscription.Subscription) bool { return find(s) != nil })
	if _, err := subs.Update(ctx, sub.ID, 0, func(s *subscription.Subscription) error { s.Paused = true; return nil }); err != nil {
		t.Fatalf("update: %v", err)
	}
	awaitSet("the update", func(s []*subscription.Subscription) bool { x := find(s); return x != nil && x.Paused })
	if err := subs.Delete(ctx, sub.ID); err != nil {
		t.Fatalf("delete: %v", err)
	}
	awaitSet("the delete", func(s []*subscription.Subscription) bool { return find(s) == nil })
	if _, err := subs.Get(ctx, sub.ID); !errors.Is(err, subscription.ErrNotFound) {
		t.Fatalf("get after delete = %v, want subscription.ErrNotFound", err)
	}
}

func subscriptionStaleUpdate(t *testing.T, ctx context.Context, rdb redis.UniversalClient) {
	subs, err := subscription.New(rdb, subscription.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sub := newSubscription("versions")
	if err := subs.Create(ctx, sub); err != nil {
		t.Fatalf("create: %v", err)
	}
	v := sub.Version
	if _, err := subs.Update(ctx, sub.ID, v, func(s *subscription.Subscription) error { s.MaxInFlight = 7; return nil }); err != nil {
		t.Fatalf("update at version %d: %v", v, err)
	}
	_, err = subs.Update(ctx, sub.ID, v, func(s *subscription.Subscription) error { s.MaxInFlight = 9; return nil })
	if !errors.Is(err, subscription.ErrVersionMismatch) {
		t.Fatalf("second update at version %d = %v, want subscription.ErrVersionMismatch", v, err)
	}
	if got, err := subs.Get(ctx, sub.ID); err != nil || got.MaxInFlight != 7 {
		t.Fatalf("after the refused update: %+v, %v; want max_in_flight 7", got, err)
	}
}

func authLifecycle(t *testing.T, ctx context.Context, rdb redis.UniversalClient) {
	tokens, err := auth.New(rdb, auth.Config{})
	if err != nil {
		t.Fatal(err)
	}
	secret, _, err := tokens.Create(ctx, "ci", []auth.Scope{auth.ScopeAdmin})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, _, err := tokens.Create(ctx, "ci", []auth.Scope{auth.ScopeAdmin}); !errors.Is(err, auth.ErrNameTaken) {
		t.Fatalf("second token named ci = %v, want auth.ErrNameTaken", err)
	}
	if tok, err := tokens.Authenticate(ctx, secret); err != nil || tok.Name != "ci" {
		t.Fatalf("authenticate = %+v, %v; want the ci token", tok, err)
	}
	if err := tokens.Revoke(ctx, "ci"); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	if _, err := tokens.Authenticate(ctx, secret); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("authenticate after revoke = %v, want auth.ErrInvalidToken", err)
	}
}

func nodesRegistry(t *testing.T, ctx context.Context, rdb redis.UniversalClient) {
	reg, err := nodes.New(rdb, nodes.Config{Interval: 50 * time.Millisecond, LiveFor: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	owned := []nodes.Ownership{{Subscription: "s", Topic: "orders", Partition: 3}}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- reg.Run(rctx, nodes.Info{ID: "node-a", Roles: []string{"dispatcher"}}, func() []nodes.Ownership { return owned })
	}()
	for {
		list, err := reg.List(ctx)
		if err == nil && len(list) == 1 && list[0].ID == "node-a" && cmp.Equal(owned, list[0].Owned) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the registry never listed node-a with its partition: %v, %v", list, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if list, err := reg.List(ctx); err != nil || len(list) != 0 {
		t.Fatalf("after the node stopped the registry lists %v, %v; want none", list, err)
	}
}
