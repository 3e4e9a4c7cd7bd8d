package subscription

import (
	"context"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/keyhook/keyhook/internal/testutil"
)

var idPattern = regexp.MustCompile(`^sub_[a-z2-7]{20}$`)

// steppingClock returns a clock that moves one second per reading, so
// subscriptions created in a row have distinct, ordered CreatedAt times.
func steppingClock() func() time.Time {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	return func() time.Time {
		now = now.Add(time.Second)
		return now
	}
}

func TestStoreCreateGetListDeleteRoundTrip(t *testing.T) {
	ctx := context.Background()
	store := newStore(t, testutil.StartRedis(t).Client(), Config{})
	store.now = steppingClock()

	first := Subscription{Name: "first", Topics: []string{"orders"}, Endpoint: Endpoint{URL: "https://a.example/hook"}}
	if err := store.Create(ctx, &first); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if !idPattern.MatchString(first.ID) {
		t.Errorf("ID = %q, want it to match %s", first.ID, idPattern)
	}
	if first.Version != 1 || first.CreatedAt.IsZero() || !first.UpdatedAt.Equal(first.CreatedAt) {
		t.Errorf("Create set version %d, created %v, updated %v; want 1 and equal non-zero times",
			first.Version, first.CreatedAt, first.UpdatedAt)
	}
	if first.Ordering != OrderKey || first.MaxInFlight != DefaultMaxInFlight || first.Start != StartEarliest {
		t.Errorf("Create did not normalize: %+v", first)
	}

	second := Subscription{Name: "second", Topics: []string{"payments"}, Endpoint: Endpoint{URL: "http://b.example"},
		ID: "sub_chosenbytheclient", Version: 42}
	if err := store.Create(ctx, &second); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if second.ID == "sub_chosenbytheclient" || second.ID == first.ID || second.Version != 1 {
		t.Errorf("Create kept caller's id/version or reused an id: %q v%d", second.ID, second.Version)
	}

	got, err := store.Get(ctx, first.ID)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if diff := cmp.Diff(&first, got); diff != "" {
		t.Errorf("Get (-want +got):\n%s", diff)
	}

	list, err := store.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if diff := cmp.Diff([]*Subscription{&first, &second}, list); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}

	if err := store.Delete(ctx, first.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := store.Get(ctx, first.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after Delete: err = %v, want ErrNotFound", err)
	}
	if err := store.Delete(ctx, first.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Delete: err = %v, want ErrNotFound", err)
	}
	list, err = store.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if diff := cmp.Diff([]*Subscription{&second}, list); diff != "" {
		t.Errorf("List after Delete (-want +got):\n%s", diff)
	}
}

func TestStoreCreateRefusesInvalidSubscriptionAndStoresNothing(t *testing.T) {
	ctx := context.Background()
	store := newStore(t, testutil.StartRedis(t).Client(), Config{})

	sub := Subscription{Name: "bad", Endpoint: Endpoint{URL: "ftp://x"}}
	err := store.Create(ctx, &sub)
	var verr *ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("Create: err = %v, want *ValidationError", err)
	}
	want := []FieldError{
		{"topics", "must list at least one topic"},
		{"endpoint.url", "must be an absolute http or https URL"},
	}
	if diff := cmp.Diff(want, verr.Errors); diff != "" {
		t.Errorf("ValidationError.Errors (-want +got):\n%s", diff)
	}
	if list, err := store.List(ctx); err != nil || len(list) != 0 {
		t.Errorf("List = %v, %v; want empty", list, err)
	}
}

func TestStoreListOrdersByCreationThenID(t *testing.T) {
	ctx := context.Background()
	store := newStore(t, testutil.StartRedis(t).Client(), Config{})
	base := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := []time.Time{base.Add(time.Second), base, base, base.Add(-time.Second)}
	store.now = func() time.Time { t := clock[0]; clock = clock[1:]; return t }

	var created []*Subscription
	for range 4 {
		s := &Subscription{Name: "n", Topics: []string{"t"}, Endpoint: Endpoint{URL: "https://h.example"}}
		if err := store.Create(ctx, s); err != nil {
			t.Fatalf("Create: %v", err)
		}
		created = append(created, s)
	}
	same := []*Subscription{created[1], created[2]}
	if same[0].ID > same[1].ID {
		same[0], same[1] = same[1], same[0]
	}
	want := []*Subscription{created[3], same[0], same[1], created[0]}

	for range 3 { // a hash has no order of its own: the sort must make one
		got, err := store.List(ctx)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("List (-want +got):\n%s", diff)
		}
	}
}

func TestStoreAnnouncesCreateAndDeleteButNotMissingDelete(t *testing.T) {
	ctx := context.Background()
	rdb := testutil.StartRedis(t).Client()
	store := newStore(t, rdb, Config{})
	ps := rdb.Subscribe(ctx, "keyhook:subscriptions:changed")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // subscription confirmation
		t.Fatalf("subscribe: %v", err)
	}
	next := func() string {
		t.Helper()
		msg, err := ps.ReceiveMessage(ctx)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		return msg.Payload
	}

	sub := Subscription{Name: "n", Topics: []string{"t"}, Endpoint: Endpoint{URL: "https://h.example"}}
	if err := store.Create(ctx, &sub); err != nil {
		t.Fatalf("Create: %v", err)
	}
	// The id and the set's version the change made.
	if got, want := next(), sub.ID+" 1"; got != want {
		t.Errorf("announced %q after Create, want %q", got, want)
	}
	if err := store.Delete(ctx, "sub_missing"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Delete missing: %v", err)
	}
	if err := store.Delete(ctx, sub.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	// Messages arrive in publish order, so the failed delete would show
	// up here first had it announced anything.
	if got, want := next(), sub.ID+" 2"; got != want {
		t.Errorf("announced %q after Delete, want %q", got, want)
	}
}

func TestStorePrefixSeparatesStores(t *testing.T) {
	ctx := context.Background()
	rdb := testutil.StartRedis(t).Client()
	def, other := newStore(t, rdb, Config{}), newStore(t, rdb, Config{Prefix: "tenant-b"})

	sub := Subscription{Name: "n", Topics: []string{"t"}, Endpoint: Endpoint{URL: "https://h.example"}}
	if err := def.Create(ctx, &sub); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if n, err := rdb.HLen(ctx, "keyhook:subscriptions").Result(); err != nil || n != 1 {
		t.Errorf("HLEN keyhook:subscriptions = %d, %v; want 1", n, err)
	}
	if _, err := other.Get(ctx, sub.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("other prefix Get: err = %v, want ErrNotFound", err)
	}
	if list, err := other.List(ctx); err != nil || len(list) != 0 {
		t.Errorf("other prefix List = %v, %v; want empty", list, err)
	}
}

func TestStoreReportsCorruptEntryAsErrorNotAbsence(t *testing.T) {
	ctx := context.Background()
	rdb := testutil.StartRedis(t).Client()
	store := newStore(t, rdb, Config{})
	rdb.HSet(ctx, "keyhook:subscriptions", "sub_broken", "{not json", "sub_renamed", `{"id":"sub_other"}`)

	for _, id := range []string{"sub_broken", "sub_renamed"} {
		if _, err := store.Get(ctx, id); err == nil || errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%q): err = %v, want a decode error", id, err)
		}
	}
	if _, err := store.List(ctx); err == nil {
		t.Error("List: no error for corrupt entries")
	}
}

// An ID made by NewID is kept by both create paths, so a caller can
// prepare what is keyed by it (the consumer group's start offsets) before
// the subscription exists; a taken one stores nothing.
func TestCreateKeepsAnIDMadeByNewID(t *testing.T) {
	ctx := context.Background()
	store, err := New(testutil.StartRedis(t).Client(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	id := NewID()
	sub := Subscription{ID: id, Name: "a", Topics: []string{"orders"}, Endpoint: Endpoint{URL: "http://a.example"}}
	if err := store.Create(ctx, &sub); err != nil || sub.ID != id {
		t.Fatalf("Create = %v, id %q; want the reserved id %q", err, sub.ID, id)
	}
	again := Subscription{ID: id, Name: "b", Topics: []string{"payments"}, Endpoint: Endpoint{URL: "http://b.example"}}
	if err := store.Create(ctx, &again); !errors.Is(err, ErrIDTaken) {
		t.Fatalf("Create with a taken id = %v, want ErrIDTaken", err)
	}
	idem := Subscription{ID: NewID(), Name: "c", Topics: []string{"refunds"}, Endpoint: Endpoint{URL: "http://c.example"}}
	want := idem.ID
	if _, err := store.CreateIdempotent(ctx, &idem, Idempotency{Caller: "ci", Key: "k1", Fingerprint: "f"}); err != nil || idem.ID != want {
		t.Fatalf("CreateIdempotent = %v, id %q; want the reserved id %q", err, idem.ID, want)
	}
	taken := Subscription{ID: id, Name: "d", Topics: []string{"audit"}, Endpoint: Endpoint{URL: "http://d.example"}}
	if _, err := store.CreateIdempotent(ctx, &taken, Idempotency{Caller: "ci", Key: "k2", Fingerprint: "f"}); !errors.Is(err, ErrIDTaken) {
		t.Fatalf("CreateIdempotent with a taken id = %v, want ErrIDTaken", err)
	}
}
