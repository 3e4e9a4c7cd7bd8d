package monitor_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyhook/keyhook/events"
	"github.com/keyhook/keyhook/internal/keyspace"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/monitor"
	"github.com/keyhook/keyhook/subscription"
)

// store is a subscription store of one subscription that counts the
// changes actually made.
type store struct {
	mu      sync.Mutex
	sub     subscription.Subscription
	changes int
}

func (s *store) Update(_ context.Context, id string, _ int64, fn func(*subscription.Subscription) error) (*subscription.Subscription, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := s.sub
	if err := fn(&next); err != nil {
		return nil, err
	}
	if next.Paused != s.sub.Paused || next.PausedReason != s.sub.PausedReason {
		s.sub = next
		s.changes++
	}
	out := s.sub
	return &out, nil
}

type recorder struct {
	mu  sync.Mutex
	evs []events.Event
}

func (r *recorder) Emit(ev events.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, ev)
}

func (r *recorder) types() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, ev := range r.evs {
		out = append(out, ev.Type)
	}
	return out
}

// flushOnce runs m for one interval: its Run writes once more as it stops.
func flushOnce(m *monitor.Monitor) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = m.Run(ctx)
}

func TestAStreakSpansNodesEndsAtASuccessAndPausesOnce(t *testing.T) {
	rdb := testutil.StartRedis(t).Client()
	sub := subscription.Subscription{ID: "sub_1", DisableAfter: "10m", Endpoint: subscription.Endpoint{URL: "https://fn.example/hook?token=x"}}
	st := &store{sub: sub}
	rec := &recorder{}
	var now atomic.Int64
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	now.Store(t0.UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	newMonitor := func() *monitor.Monitor {
		m, err := monitor.New(rdb, st, rec, monitor.Config{Now: clock, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	a, b := newMonitor(), newMonitor()
	ctx := context.Background()
	since := func() time.Time {
		s, err := monitor.Since(ctx, rdb, keyspace.Keyspace{}, "sub_1")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	// Node a fails first; node b fails later: the streak is a's.
	a.Attempt(&sub, false, t0)
	flushOnce(a)
	b.Attempt(&sub, false, t0.Add(time.Minute))
	flushOnce(b)
	if got := since(); !got.Equal(t0) {
		t.Fatalf("streak start = %v, want %v (the first failure on any node)", got, t0)
	}
	// A success on b ends it; a's failure from before the success, written
	// late, does not start it again.
	b.Attempt(&sub, true, t0.Add(2*time.Minute))
	flushOnce(b)
	a.Attempt(&sub, false, t0.Add(90*time.Second))
	flushOnce(a)
	if got := since(); !got.IsZero() {
		t.Fatalf("streak start after a success = %v, want none (a success anywhere ends the streak)", got)
	}
	// A new streak, 10 minutes long: both nodes judge it; one pause.
	t1 := t0.Add(3 * time.Minute)
	a.Attempt(&sub, false, t1)
	flushOnce(a)
	now.Store(t1.Add(9 * time.Minute).UnixNano())
	b.Attempt(&sub, false, t1.Add(9*time.Minute))
	flushOnce(b)
	if st.sub.Paused {
		t.Fatal("paused after 9 minutes of a 10m disable_after")
	}
	now.Store(t1.Add(10 * time.Minute).UnixNano())
	a.Attempt(&sub, false, t1.Add(10*time.Minute))
	b.Attempt(&sub, false, t1.Add(10*time.Minute))
	flushOnce(a)
	flushOnce(b)
	if !st.sub.Paused || st.sub.PausedBy != subscription.PausedByAuto || st.changes != 1 {
		t.Fatalf("subscription paused=%v by %q after %d changes, want paused by auto in one change", st.sub.Paused, st.sub.PausedBy, st.changes)
	}
	wantReason := "endpoint failing since " + t1.Format(time.RFC3339) + " (disable_after 10m)"
	if st.sub.PausedReason != wantReason {
		t.Errorf("paused_reason = %q, want %q", st.sub.PausedReason, wantReason)
	}
	if got := rec.types(); len(got) != 1 || got[0] != events.TypeSubscriptionAutoPaused {
		t.Errorf("events = %v, want one %s", got, events.TypeSubscriptionAutoPaused)
	}
	if strings.Contains(string(rec.evs[0].Data), "token=x") {
		t.Errorf("event data %s shows the endpoint's query", rec.evs[0].Data)
	}

	// A resume clears the streak; a failure seen before it, written after,
	// starts none.
	if err := a.Clear(ctx, "sub_1"); err != nil {
		t.Fatal(err)
	}
	if got := since(); !got.IsZero() {
		t.Fatalf("streak start after a resume = %v, want none", got)
	}
	b.Attempt(&sub, false, t1.Add(10*time.Minute-time.Second))
	flushOnce(b)
	if got := since(); !got.IsZero() {
		t.Fatalf("streak start from a failure before the resume = %v, want none", got)
	}
}

func TestDeadLettersPastTheThresholdEmitOncePerWindowOverNodes(t *testing.T) {
	rdb := testutil.StartRedis(t).Client()
	rec := &recorder{}
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	cfg := monitor.Config{DeadLetterThreshold: 5, DeadLetterWindow: time.Minute, Now: func() time.Time { return t0 }, Logger: slog.New(slog.DiscardHandler)}
	a, _ := monitor.New(rdb, &store{}, rec, cfg)
	b, _ := monitor.New(rdb, &store{}, rec, cfg)
	for range 3 {
		a.DeadLettered("sub_1")
	}
	flushOnce(a)
	if got := rec.types(); len(got) != 0 {
		t.Fatalf("events after 3 dead letters = %v, want none below 5", got)
	}
	for range 3 {
		b.DeadLettered("sub_1")
	}
	flushOnce(b)
	a.DeadLettered("sub_1")
	flushOnce(a)
	got := rec.types()
	if len(got) != 1 || got[0] != events.TypeDeadLettersThreshold {
		t.Fatalf("events = %v, want one %s for 7 dead letters over two nodes", got, events.TypeDeadLettersThreshold)
	}
	if d := string(rec.evs[0].Data); !strings.Contains(d, `"count":6`) || !strings.Contains(d, `"threshold":5`) {
		t.Errorf("data = %s, want count 6 (when crossed) and threshold 5", d)
	}
}
