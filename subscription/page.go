package subscription

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Limits of PageRequest.Limit.
const (
	// DefaultPageLimit is the page size when PageRequest.Limit is 0.
	DefaultPageLimit = 100
	// MaxPageLimit is the largest page size.
	MaxPageLimit = 1000
)

// ErrInvalidCursor is returned (wrapped) for a page cursor that was not
// made by this package, or was altered. Compare with errors.Is.
var ErrInvalidCursor = errors.New("subscription: invalid cursor")

// PageRequest asks for one page of subscriptions.
type PageRequest struct {
	// Limit is the most subscriptions on the page, 1 to MaxPageLimit.
	// Default (0): DefaultPageLimit.
	Limit int
	// Cursor is the NextCursor of the previous page; "" starts at the
	// beginning.
	Cursor string
	// Topic, when not "", keeps only the subscriptions that read it.
	Topic string
}

// Page is one page of subscriptions, oldest first.
type Page struct {
	// Items are the page's subscriptions, never nil.
	Items []*Subscription
	// NextCursor continues after the last item; "" when there is nothing
	// more.
	NextCursor string
}

// Page returns the subscriptions after req.Cursor, in List's order
// (CreatedAt, then ID). A cursor is a position in that order, not an
// index: subscriptions created or deleted between two calls do not make
// the next page repeat or skip any other subscription. A subscription
// created during paging (its CreatedAt is now) lands on a later page.
// Limit outside 0 to MaxPageLimit is an error; a cursor not made by Page
// gives an error wrapping ErrInvalidCursor.
func (s *Store) Page(ctx context.Context, req PageRequest) (*Page, error) {
	limit := req.Limit
	if limit == 0 {
		limit = DefaultPageLimit
	}
	if limit < 1 || limit > MaxPageLimit {
		return nil, fmt.Errorf("subscription: page: limit %d is not between 1 and %d", req.Limit, MaxPageLimit)
	}
	var after *position
	if req.Cursor != "" {
		p, err := decodeCursor(req.Cursor)
		if err != nil {
			return nil, fmt.Errorf("subscription: page: %w", err)
		}
		after = &p
	}
	all, err := s.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("subscription: page: %w", err)
	}
	page := &Page{Items: []*Subscription{}}
	for _, sub := range all {
		if after != nil && comparePosition(positionOf(sub), *after) <= 0 {
			continue
		}
		if req.Topic != "" && !slices.Contains(sub.Topics, req.Topic) {
			continue
		}
		if len(page.Items) == limit {
			page.NextCursor = encodeCursor(positionOf(page.Items[limit-1]))
			break
		}
		page.Items = append(page.Items, sub)
	}
	return page, nil
}

// position is a place in List's order.
type position struct {
	created time.Time
	id      string
}

func positionOf(s *Subscription) position { return position{created: s.CreatedAt, id: s.ID} }

func comparePosition(a, b position) int {
	if c := a.created.Compare(b.created); c != 0 {
		return c
	}
	return cmp.Compare(a.id, b.id)
}

// A cursor is the unpadded base64url of "<CreatedAt in unix nanoseconds>
// <ID>": opaque to clients, and without state on the server.
func encodeCursor(p position) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(p.created.UnixNano(), 10) + " " + p.id))
}

func decodeCursor(c string) (position, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return position{}, ErrInvalidCursor
	}
	nanos, id, ok := strings.Cut(string(raw), " ")
	if !ok || !strings.HasPrefix(id, IDPrefix) {
		return position{}, ErrInvalidCursor
	}
	n, err := strconv.ParseInt(nanos, 10, 64)
	if err != nil {
		return position{}, ErrInvalidCursor
	}
	return position{created: time.Unix(0, n).UTC(), id: id}, nil
}
