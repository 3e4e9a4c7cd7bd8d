package deliverylog_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/keyhook/keyhook/deliverylog"
	"github.com/keyhook/keyhook/internal/keyspace"
	"github.com/keyhook/keyhook/internal/testutil"
)

// runWriter runs w until the returned stop, which waits for its last
// write.
func runWriter(t *testing.T, w *deliverylog.Writer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

func entry(sub, id string, n int, at time.Time, result string, status int) deliverylog.Entry {
	return deliverylog.Entry{Subscription: sub, DeliveryID: id, Topic: "orders", Partition: 2, Offset: 40,
		Attempt: deliverylog.Attempt{Number: n, Time: at, Status: status, LatencyMS: 1.5, Result: result}}
}

func TestAttemptsAreKeptPerDeliveryAndFailuresListedNewestFirst(t *testing.T) {
	rdb := testutil.StartRedis(t).Client()
	w, err := deliverylog.NewWriter(rdb, deliverylog.WriterConfig{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	stop := runWriter(t, w)
	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	w.Log(entry("s", "dlv_a", 1, t0, deliverylog.ResultRetry, 503))
	w.Log(entry("s", "dlv_a", 2, t0.Add(time.Second), deliverylog.ResultDelivered, 200))
	w.Log(entry("s", "dlv_b", 1, t0.Add(2*time.Second), deliverylog.ResultDelivered, 200))
	w.Log(entry("s", "dlv_c", 1, t0.Add(3*time.Second), deliverylog.ResultFailed, 400))
	stop()

	r := deliverylog.NewReader(rdb, keyspace.Keyspace{})
	ctx := context.Background()
	d, err := r.Get(ctx, "s", "dlv_a")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Attempts) != 2 || d.Attempts[0].Status != 503 || d.Attempts[1].Status != 200 || d.Topic != "orders" || d.Partition != 2 || d.Offset != 40 {
		t.Fatalf("dlv_a = %+v, want its two attempts (503, 200) of orders/2/40", d)
	}
	if _, err := r.Get(ctx, "s", "dlv_zz"); !errors.Is(err, deliverylog.ErrNotFound) {
		t.Fatalf("Get of an unknown id = %v, want ErrNotFound", err)
	}
	if _, err := r.Get(ctx, "other", "dlv_a"); !errors.Is(err, deliverylog.ErrNotFound) {
		t.Fatalf("Get through another subscription = %v, want ErrNotFound", err)
	}
	page, err := r.List(ctx, "s", true, 10, "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, it := range page.Items {
		got = append(got, it.DeliveryID)
	}
	if strings.Join(got, ",") != "dlv_c,dlv_a" {
		t.Fatalf("failures = %v, want dlv_c,dlv_a (newest first; dlv_b never failed)", got)
	}
	if page.Items[1].Attempts != 2 || page.Items[1].Last.Status != 200 {
		t.Errorf("dlv_a summary = %+v, want 2 attempts, the last a 200", page.Items[1])
	}
}

func TestTheCapEvictsTheOldestDeliveriesAndPagesDoNotRepeat(t *testing.T) {
	rdb := testutil.StartRedis(t).Client()
	w, err := deliverylog.NewWriter(rdb, deliverylog.WriterConfig{MaxDeliveries: 5, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	stop := runWriter(t, w)
	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	for i := range 12 {
		// Pairs share a millisecond, so pages cut between equal times.
		w.Log(entry("s", fmt.Sprintf("dlv_%02d", i), 1, t0.Add(time.Duration(i/2)*time.Millisecond), deliverylog.ResultFailed, 500))
	}
	stop()
	ctx := context.Background()
	ks := keyspace.Keyspace{}
	if n := rdb.ZCard(ctx, ks.DeliveryRecent("s")).Val(); n != 5 {
		t.Fatalf("deliveries kept = %d, want the cap, 5", n)
	}
	if n := rdb.ZCard(ctx, ks.DeliveryFailed("s")).Val(); n != 5 {
		t.Fatalf("failures kept = %d, want 5", n)
	}
	if n := rdb.Exists(ctx, ks.DeliveryAttempts("s", "dlv_00"), ks.DeliveryAttempts("s", "dlv_06")).Val(); n != 0 {
		t.Fatalf("%d lists of evicted deliveries remain, want 0", n)
	}
	r := deliverylog.NewReader(rdb, ks)
	var got []string
	cursor := ""
	for range 5 {
		page, err := r.List(ctx, "s", true, 2, cursor)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range page.Items {
			got = append(got, it.DeliveryID)
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if want := "dlv_11,dlv_10,dlv_09,dlv_08,dlv_07"; strings.Join(got, ",") != want {
		t.Fatalf("pages = %v, want %s", got, want)
	}
	if _, err := r.List(ctx, "s", true, 2, "not-a-cursor!"); !errors.Is(err, deliverylog.ErrInvalidCursor) {
		t.Fatalf("List with a bad cursor = %v, want ErrInvalidCursor", err)
	}
	if err := r.DeleteSubscription(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if keys := rdb.Keys(ctx, "keyhook:dlog*").Val(); len(keys) != 0 {
		t.Fatalf("keys left after DeleteSubscription: %v", keys)
	}
}

func TestAFullBufferDropsInsteadOfBlocking(t *testing.T) {
	rdb := testutil.StartRedis(t).Client()
	w, err := deliverylog.NewWriter(rdb, deliverylog.WriterConfig{Buffer: 2, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		for i := range 100 { // no Run: nothing reads
			w.Log(entry("s", fmt.Sprint(i), 1, time.Now(), deliverylog.ResultDelivered, 200))
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Log blocked with the writer behind")
	}
}

func TestExcerptCutsAtACharacter(t *testing.T) {
	body := []byte("ab€cd") // € is 3 bytes: 2..4
	for _, tt := range []struct {
		max  int
		want string
		cut  bool
	}{{10, "ab€cd", false}, {4, "ab", true}, {5, "ab€", true}, {2, "ab", true}} {
		got, cut := deliverylog.Excerpt(body, tt.max)
		if got != tt.want || cut != tt.cut {
			t.Errorf("Excerpt(%q, %d) = %q, %v; want %q, %v", body, tt.max, got, cut, tt.want, tt.cut)
		}
	}
	if got, _ := deliverylog.Excerpt([]byte{0xff, 'a'}, 10); got != "\uFFFDa" {
		t.Errorf("Excerpt of invalid UTF-8 = %q, want it replaced", got)
	}
}

func FuzzExcerpt(f *testing.F) {
	f.Add([]byte("ab€cd"), 4)
	f.Add([]byte{0xe2, 0x82}, 1)
	f.Fuzz(func(t *testing.T, body []byte, max int) {
		if max < 0 || max > 4096 {
			return
		}
		got, cut := deliverylog.Excerpt(body, max)
		if !utf8.ValidString(got) {
			t.Fatalf("Excerpt(%q, %d) = %q, not valid UTF-8", body, max, got)
		}
		if cut != (len(body) > max) {
			t.Fatalf("Excerpt(%q, %d) cut = %v", body, max, cut)
		}
		// Each byte kept becomes at most one replacement character.
		if len(got) > 3*max {
			t.Fatalf("Excerpt(%q, %d) = %d bytes", body, max, len(got))
		}
	})
}
