package subscription

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/keyhook/keyhook/internal/testutil"
)

func newSub() *Subscription {
	return &Subscription{Name: "n", Topics: []string{"orders"}, Endpoint: Endpoint{URL: "https://h.example"}}
}

func TestUpdateStoresTheNextVersionAndAnnouncesIt(t *testing.T) {
	ctx := context.Background()
	rdb := testutil.StartRedis(t).Client()
	store := newStore(t, rdb, Config{})
	store.now = steppingClock()
	sub := newSub()
	if err := store.Create(ctx, sub); err != nil {
		t.Fatal(err)
	}
	ps := rdb.Subscribe(ctx, "keyhook:subscriptions:changed")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}

	got, err := store.Update(ctx, sub.ID, 1, func(s *Subscription) error {
		s.Name = "renamed"
		s.ID, s.Version, s.CreatedAt = "sub_hijack", 99, s.CreatedAt.AddDate(-1, 0, 0) // ignored
		s.MaxInFlight = 0                                                              // normalized back to the default
		return nil
	})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	want := *sub
	want.Name, want.Version, want.UpdatedAt = "renamed", 2, got.UpdatedAt
	if diff := cmp.Diff(&want, got); diff != "" {
		t.Errorf("Update result (-want +got):\n%s", diff)
	}
	if !got.UpdatedAt.After(sub.UpdatedAt) {
		t.Errorf("UpdatedAt %v not after %v", got.UpdatedAt, sub.UpdatedAt)
	}
	if stored, _ := store.Get(ctx, sub.ID); !cmp.Equal(stored, got) {
		t.Errorf("stored %+v, returned %+v", stored, got)
	}
	// The id and the set's version: the create made 1.
	if msg, err := ps.ReceiveMessage(ctx); err != nil || msg.Payload != sub.ID+" 2" {
		t.Errorf("announced %v, %v; want %s 2", msg, err, sub.ID)
	}

	// No change, no new version, no write.
	same, err := store.Update(ctx, sub.ID, AnyVersion, func(s *Subscription) error { return nil })
	if err != nil || same.Version != 2 {
		t.Errorf("no-op Update = v%d, %v; want version 2 kept", same.Version, err)
	}
}

func TestUpdateRefusesAndChangesNothing(t *testing.T) {
	ctx := context.Background()
	store := newStore(t, testutil.StartRedis(t).Client(), Config{})
	sub := newSub()
	if err := store.Create(ctx, sub); err != nil {
		t.Fatal(err)
	}
	sentinel := errors.New("fn says no")
	for _, tt := range []struct {
		name     string
		id       string
		expected int64
		fn       func(*Subscription) error
		check    func(error) bool
	}{
		{"unknown id", "sub_none", AnyVersion, func(*Subscription) error { return nil }, func(err error) bool { return errors.Is(err, ErrNotFound) }},
		{"stale version", sub.ID, 7, func(*Subscription) error { return nil }, func(err error) bool { return errors.Is(err, ErrVersionMismatch) }},
		{"fn error", sub.ID, AnyVersion, func(*Subscription) error { return sentinel }, func(err error) bool { return errors.Is(err, sentinel) }},
		{"invalid result", sub.ID, 1, func(s *Subscription) error { s.Topics = nil; return nil }, func(err error) bool {
			var verr *ValidationError
			return errors.As(err, &verr) && verr.Errors[0].Field == "topics"
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := store.Update(ctx, tt.id, tt.expected, tt.fn); !tt.check(err) {
				t.Errorf("Update: err = %v", err)
			}
			if got, _ := store.Get(ctx, sub.ID); !cmp.Equal(got, sub) {
				t.Errorf("stored changed: %+v", got)
			}
		})
	}
}

func TestConcurrentUpdatesNeverLoseAChange(t *testing.T) {
	ctx := context.Background()
	store := newStore(t, testutil.StartRedis(t).Client(), Config{})
	sub := newSub()
	if err := store.Create(ctx, sub); err != nil {
		t.Fatal(err)
	}
	// With AnyVersion each increment is retried on the newer version;
	// with the version read first, exactly one writer per version wins.
	const writers = 4
	var wg sync.WaitGroup
	var mu sync.Mutex
	var mismatches int
	for range writers {
		wg.Go(func() {
			_, err := store.Update(ctx, sub.ID, AnyVersion, func(s *Subscription) error {
				s.MaxInFlight++
				return nil
			})
			if errors.Is(err, ErrVersionMismatch) {
				mu.Lock()
				mismatches++
				mu.Unlock()
			} else if err != nil {
				t.Errorf("Update: %v", err)
			}
		})
	}
	wg.Wait()
	got, _ := store.Get(ctx, sub.ID)
	if applied := got.MaxInFlight - DefaultMaxInFlight; applied+mismatches != writers || got.Version != int64(1+applied) {
		t.Errorf("max_in_flight grew by %d with %d mismatches and version %d; want every writer counted once", applied, mismatches, got.Version)
	}

	v := got.Version
	wins := 0
	for range writers {
		wg.Go(func() {
			if _, err := store.Update(ctx, sub.ID, v, func(s *Subscription) error { s.MaxInFlight++; return nil }); err == nil {
				mu.Lock()
				wins++
				mu.Unlock()
			} else if !errors.Is(err, ErrVersionMismatch) {
				t.Errorf("Update: %v", err)
			}
		})
	}
	wg.Wait()
	if wins != 1 {
		t.Errorf("%d writers won version %d, want 1", wins, v)
	}
}

func TestReplaceKeepsIdentityAndSetsEverythingElse(t *testing.T) {
	ctx := context.Background()
	store := newStore(t, testutil.StartRedis(t).Client(), Config{})
	sub := newSub()
	sub.Ordering, sub.MaxInFlight = OrderNone, 5
	if err := store.Create(ctx, sub); err != nil {
		t.Fatal(err)
	}
	next := &Subscription{ID: sub.ID, Name: "other", Topics: []string{"refunds"}, Endpoint: Endpoint{URL: "https://o.example"}, Paused: true}
	if err := store.Replace(ctx, next, sub.Version); err != nil {
		t.Fatalf("Replace: %v", err)
	}
	want := &Subscription{ID: sub.ID, Name: "other", Topics: []string{"refunds"}, Endpoint: Endpoint{URL: "https://o.example"},
		Ordering: OrderKey, Sharing: SharingAuto, MaxInFlight: DefaultMaxInFlight, Start: StartEarliest, Paused: true,
		CreatedAt: sub.CreatedAt, UpdatedAt: next.UpdatedAt, Version: 2}
	if diff := cmp.Diff(want, next); diff != "" {
		t.Errorf("Replace (-want +got):\n%s", diff)
	}
	if err := store.Replace(ctx, next, 1); !errors.Is(err, ErrVersionMismatch) {
		t.Errorf("stale Replace: err = %v, want ErrVersionMismatch", err)
	}
}

func TestDeleteVersionDeletesOnlyTheExpectedVersion(t *testing.T) {
	ctx := context.Background()
	store := newStore(t, testutil.StartRedis(t).Client(), Config{})
	sub := newSub()
	if err := store.Create(ctx, sub); err != nil {
		t.Fatal(err)
	}
	if err := store.DeleteVersion(ctx, sub.ID, 2); !errors.Is(err, ErrVersionMismatch) {
		t.Errorf("DeleteVersion stale: err = %v", err)
	}
	if _, err := store.Get(ctx, sub.ID); err != nil {
		t.Errorf("deleted by a stale version: %v", err)
	}
	if err := store.DeleteVersion(ctx, sub.ID, 1); err != nil {
		t.Errorf("DeleteVersion: %v", err)
	}
	if err := store.DeleteVersion(ctx, sub.ID, 1); !errors.Is(err, ErrNotFound) {
		t.Errorf("DeleteVersion again: err = %v, want ErrNotFound", err)
	}
	if err := store.DeleteVersion(ctx, sub.ID, AnyVersion); !errors.Is(err, ErrNotFound) {
		t.Errorf("DeleteVersion any: err = %v, want ErrNotFound", err)
	}
}
