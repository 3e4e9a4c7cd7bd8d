package deadletter_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/keyhook/keyhook/deadletter"
	"github.com/keyhook/keyhook/internal/testutil"
)

// A queued redrive stays queued until Done, whatever Next returned, and a
// deleted subscription's queues are gone.
func TestQueueKeepsARedriveUntilDone(t *testing.T) {
	ctx := context.Background()
	rdb := testutil.StartRedis(t).Client()
	q := newQueue(t, rdb)
	err := q.Push(ctx, "sub-a", []deadletter.Redrive{
		{DeliveryID: "dlv_1", Topic: "orders", Partition: 0, Offset: 4, Key: []byte("k"), Value: []byte("v1")},
		{DeliveryID: "dlv_2", Topic: "orders", Partition: 0, Offset: 9, Key: []byte("k"), Value: []byte("v2")},
		{DeliveryID: "dlv_3", Topic: "orders", Partition: 1, Offset: 2, Key: nil, Value: []byte("v3")},
	})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := q.Next(ctx, "sub-a", "orders", 0, 10)
	if err != nil || len(rs) != 2 || rs[0].Offset != 4 || rs[1].Offset != 9 {
		t.Fatalf("Next(orders/0) = %+v, %v; want offsets 4 and 9 in order", rs, err)
	}
	if again, _ := q.Next(ctx, "sub-a", "orders", 0, 10); len(again) != 2 {
		t.Fatalf("a second Next sees %d redrives, want both still queued", len(again))
	}
	if rec := rs[0].Record(); string(rec.Value) != "v1" || rec.Offset != 4 || rec.Topic != "orders" {
		t.Errorf("Record() = %+v, want the source record orders/0/4", rec)
	}
	if got, err := q.Queued(ctx, "sub-a"); err != nil || len(got) != 2 {
		t.Fatalf("Queued = %v, %v; want orders/0 and orders/1", got, err)
	}
	if err := q.Done(ctx, rs[0]); err != nil {
		t.Fatal(err)
	}
	if left, _ := q.Next(ctx, "sub-a", "orders", 0, 10); len(left) != 1 || left[0].DeliveryID != "dlv_2" {
		t.Fatalf("after Done the queue holds %+v, want dlv_2 only", left)
	}
	if err := q.Done(ctx, rs[1]); err != nil {
		t.Fatal(err)
	}
	if got, _ := q.Queued(ctx, "sub-a"); len(got) != 1 || got[0] != (deadletter.Source{Topic: "orders", Partition: 1}) {
		t.Fatalf("with orders/0 emptied Queued = %v, want orders/1 only", got)
	}
	if other, _ := q.Next(ctx, "sub-a", "orders", 1, 10); len(other) != 1 || other[0].Key != nil {
		t.Fatalf("orders/1 holds %+v, want dlv_3 without a key", other)
	}
	if err := q.DeleteSubscription(ctx, "sub-a"); err != nil {
		t.Fatal(err)
	}
	// The count of pushes is every subscription's, and stays.
	if keys, _ := rdb.Keys(ctx, "*").Result(); len(keys) != 1 || keys[0] != "keyhook:redrives:queued" {
		t.Fatalf("after DeleteSubscription Redis holds %q, want only the count of pushes", keys)
	}
}

// Each push moves the count of pushes that the nodes' polls read before
// listing the queues.
func TestPushMovesTheCountOfPushes(t *testing.T) {
	ctx := context.Background()
	rdb := testutil.StartRedis(t).Client()
	q := newQueue(t, rdb)
	before, err := q.QueuedVersion(ctx)
	if err != nil || before != "" {
		t.Fatalf("QueuedVersion before any push = %q, %v; want \"\"", before, err)
	}
	seen := map[string]bool{before: true}
	for i := range 3 {
		if err := q.Push(ctx, "sub-"+strconv.Itoa(i), []deadletter.Redrive{{DeliveryID: "dlv", Topic: "orders", Partition: 0, Offset: int64(i)}}); err != nil {
			t.Fatal(err)
		}
		v, err := q.QueuedVersion(ctx)
		if err != nil || seen[v] {
			t.Fatalf("QueuedVersion after push %d = %q, %v; want one not seen before (%v)", i, v, err, seen)
		}
		seen[v] = true
	}
}

// QueuedMany lists each subscription's queues as Queued does, and leaves
// out the subscriptions with none.
func TestQueuedManyListsEachSubscriptionsQueues(t *testing.T) {
	ctx := context.Background()
	rdb := testutil.StartRedis(t).Client()
	q := newQueue(t, rdb)
	for sub, parts := range map[string][]int32{"sub-a": {0, 3}, "sub-b": {1}} {
		for _, p := range parts {
			if err := q.Push(ctx, sub, []deadletter.Redrive{{DeliveryID: "dlv", Topic: "orders", Partition: p}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := q.QueuedMany(ctx, []string{"sub-a", "sub-b", "sub-empty"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got["sub-empty"]; ok || len(got) != 2 {
		t.Fatalf("QueuedMany = %v, want sub-a and sub-b only", got)
	}
	for _, sub := range []string{"sub-a", "sub-b"} {
		want, _ := q.Queued(ctx, sub)
		if len(got[sub]) != len(want) {
			t.Fatalf("QueuedMany[%s] = %v, Queued = %v", sub, got[sub], want)
		}
		seen := map[deadletter.Source]bool{}
		for _, s := range want {
			seen[s] = true
		}
		for _, s := range got[sub] {
			if !seen[s] {
				t.Fatalf("QueuedMany[%s] lists %v, which Queued does not (%v)", sub, s, want)
			}
		}
	}
}
