package subscription

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/keyhook/keyhook/internal/testutil"
)

func TestCreateIdempotentCreatesOnceAndReplaysTheFirst(t *testing.T) {
	ctx := context.Background()
	rdb := testutil.StartRedis(t).Client()
	store := NewStore(rdb, "")

	first := newSub()
	replayed, err := store.CreateIdempotent(ctx, first, "key-1", "fp-a")
	if err != nil || replayed {
		t.Fatalf("first CreateIdempotent = %v, %v", replayed, err)
	}
	// The subscription changes; a replay still answers it as created.
	if _, err := store.Update(ctx, first.ID, AnyVersion, func(s *Subscription) error { s.Name = "changed"; return nil }); err != nil {
		t.Fatal(err)
	}
	again := newSub()
	replayed, err = store.CreateIdempotent(ctx, again, "key-1", "fp-a")
	if err != nil || !replayed {
		t.Fatalf("repeat CreateIdempotent = %v, %v", replayed, err)
	}
	if diff := cmp.Diff(first, again); diff != "" {
		t.Errorf("replay (-first +replay):\n%s", diff)
	}

	other := newSub()
	if _, err := store.CreateIdempotent(ctx, other, "key-1", "fp-b"); !errors.Is(err, ErrIdempotencyKeyReused) {
		t.Errorf("reused key: err = %v, want ErrIdempotencyKeyReused", err)
	}
	if other.ID != "" {
		t.Errorf("a refused create changed its argument: %+v", other)
	}
	bad := &Subscription{Name: "bad"}
	var verr *ValidationError
	if _, err := store.CreateIdempotent(ctx, bad, "key-2", "fp"); !errors.As(err, &verr) {
		t.Errorf("invalid: err = %v, want *ValidationError", err)
	}
	if n, _ := rdb.Exists(ctx, store.keys.idempotency("key-2")).Result(); n != 0 {
		t.Error("an invalid create recorded its key")
	}
	if list, _ := store.List(ctx); len(list) != 1 {
		t.Errorf("%d subscriptions stored, want 1", len(list))
	}
	ttl, _ := rdb.PTTL(ctx, store.keys.idempotency("key-1")).Result()
	if ttl <= IdempotencyTTL-time.Minute || ttl > IdempotencyTTL {
		t.Errorf("record TTL = %v, want %v", ttl, IdempotencyTTL)
	}
}

func TestIdempotencyKeysExpire(t *testing.T) {
	ctx := context.Background()
	store := NewStore(testutil.StartRedis(t).Client(), "")
	store.idempotencyTTL = 50 * time.Millisecond
	a := newSub()
	if _, err := store.CreateIdempotent(ctx, a, "k", "fp"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		b := newSub()
		replayed, err := store.CreateIdempotent(ctx, b, "k", "fp")
		if err != nil {
			t.Fatal(err)
		}
		if !replayed {
			if b.ID == a.ID {
				t.Error("an expired key created the same id")
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the key never expired")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestIdempotencyRecordSharesTheSubscriptionsSlot(t *testing.T) {
	k := newKeys("")
	rec := k.idempotency("anything")
	// The hash tag of the record is the hash's whole name, which is how
	// Redis Cluster hashes a key without braces: one slot for both.
	if want := "{" + k.subscriptions + "}:idempotency:"; rec[:len(want)] != want {
		t.Errorf("record key %q does not start with %q", rec, want)
	}
}
