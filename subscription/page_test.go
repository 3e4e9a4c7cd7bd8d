package subscription

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/keyhook/keyhook/internal/testutil"
)

func TestPageWalksTheListInOrderAndFilters(t *testing.T) {
	ctx := context.Background()
	store := newStore(t, testutil.StartRedis(t).Client(), Config{})
	store.now = steppingClock()
	var all []*Subscription
	for i := range 7 {
		s := newSub()
		if i%2 == 1 {
			s.Topics = []string{"orders", "refunds"}
		}
		if err := store.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		all = append(all, s)
	}
	walk := func(req PageRequest) []*Subscription {
		t.Helper()
		var out []*Subscription
		for range 10 {
			p, err := store.Page(ctx, req)
			if err != nil {
				t.Fatalf("Page: %v", err)
			}
			if len(p.Items) > req.Limit {
				t.Fatalf("page of %d items, limit %d", len(p.Items), req.Limit)
			}
			out = append(out, p.Items...)
			if p.NextCursor == "" {
				return out
			}
			req.Cursor = p.NextCursor
		}
		t.Fatal("paging does not end")
		return nil
	}
	if diff := cmp.Diff(all, walk(PageRequest{Limit: 3})); diff != "" {
		t.Errorf("pages (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]*Subscription{all[1], all[3], all[5]}, walk(PageRequest{Limit: 2, Topic: "refunds"})); diff != "" {
		t.Errorf("filtered pages (-want +got):\n%s", diff)
	}
	// Exactly full last page: no cursor to an empty page.
	p, err := store.Page(ctx, PageRequest{Limit: 7})
	if err != nil || len(p.Items) != 7 || p.NextCursor != "" {
		t.Errorf("Page(limit 7) = %d items, cursor %q, %v", len(p.Items), p.NextCursor, err)
	}
	p, err = store.Page(ctx, PageRequest{})
	if err != nil || len(p.Items) != 7 {
		t.Errorf("Page(default limit) = %v, %v", p, err)
	}
}

func TestPageRefusesForeignCursorsAndLimits(t *testing.T) {
	store := newStore(t, testutil.StartRedis(t).Client(), Config{})
	for _, c := range []string{"x", "!!", encodeCursor(position{id: "nope"}), "MTIz"} {
		if _, err := store.Page(context.Background(), PageRequest{Cursor: c}); !errors.Is(err, ErrInvalidCursor) {
			t.Errorf("cursor %q: err = %v, want ErrInvalidCursor", c, err)
		}
	}
	for _, l := range []int{-1, MaxPageLimit + 1} {
		if _, err := store.Page(context.Background(), PageRequest{Limit: l}); err == nil {
			t.Errorf("limit %d accepted", l)
		}
	}
}

func FuzzDecodeCursor(f *testing.F) {
	f.Add(encodeCursor(position{id: "sub_abc"}))
	f.Add("")
	f.Fuzz(func(t *testing.T, c string) {
		p, err := decodeCursor(c)
		if err != nil {
			return
		}
		if back, err := decodeCursor(encodeCursor(p)); err != nil || back != p {
			t.Fatalf("cursor %q decodes to %+v, which does not round-trip: %+v %v", c, p, back, err)
		}
	})
}
