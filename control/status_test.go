package control_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/control"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
)

// Status joins Kafka's side (commit, log end, lag) with the tracking
// state the owner flushed (watermark, owner), one entry per partition in
// topic and partition order, a partition nobody wrote to included.
func TestStatusJoinsCommitsLogEndsAndTrackingState(t *testing.T) {
	brokers := testutil.Kfake(t, 2, "st")
	rdb := testutil.StartRedis(t).Client()
	sink := testutil.StartSink(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 6 {
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "st", Value: fmt.Appendf(nil, "%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	store, err := subscription.New(rdb, subscription.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sub := &subscription.Subscription{Name: "st", Topics: []string{"st"}, Endpoint: subscription.Endpoint{URL: sink.URL}}
	if err := store.Create(context.Background(), sub); err != nil {
		t.Fatal(err)
	}
	startNode(t, brokers, rdb, store)
	adm := testutil.Admin(t, brokers)
	testutil.WaitCommitted(t, adm, sub.GroupID(), map[int32]int64{0: 6}, 30*time.Second)
	tracker, err := tracking.New(rdb, tracking.Config{})
	if err != nil {
		t.Fatal(err)
	}

	type row struct {
		Partition                         int32
		Committed, LogEnd, Lag, Watermark int64
		Owned                             bool
	}
	var got []row
	var ranges []subscription.RangeStatus
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := control.NewStatusReader(adm, tracker).Status(context.Background(), sub)
		if err != nil {
			t.Fatal(err)
		}
		if st.SubscriptionID != sub.ID {
			t.Errorf("status of %q, want %q", st.SubscriptionID, sub.ID)
		}
		got = got[:0]
		if len(st.Partitions) > 0 {
			ranges = st.Partitions[0].Ranges
		}
		for _, p := range st.Partitions {
			got = append(got, row{p.Partition, p.Committed, p.LogEnd, p.Lag, p.Watermark, p.Owner != ""})
		}
		if len(got) == 2 && got[0].Watermark == 6 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // the owner flushes its watermark every 20ms
	}
	if len(got) != 2 {
		t.Fatalf("status lists %d partitions, want 2: %+v", len(got), got)
	}
	// Partition 1 holds nothing: whether its owner flushed a state yet is
	// not the point.
	want := []row{
		{Partition: 0, Committed: 6, LogEnd: 6, Lag: 0, Watermark: 6, Owned: true},
		{Partition: 1, Committed: -1, LogEnd: 0, Lag: 0, Watermark: got[1].Watermark, Owned: got[1].Owned},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	// One node holds the whole key hash space of partition 0.
	if len(ranges) != 1 || ranges[0].Lo != 0 || ranges[0].Hi != 65536 || ranges[0].Owner == "" || ranges[0].Watermark != 6 {
		t.Errorf("partition 0 ranges = %+v; want one range 0-65536, owned, watermark 6", ranges)
	}
}
