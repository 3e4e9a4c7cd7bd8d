package deliverylog

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keyhook/keyhook/internal/keyspace"
)

// ErrNotFound is returned (wrapped) for a delivery id the log does not
// hold: never logged, expired, or evicted by the cap.
var ErrNotFound = errors.New("deliverylog: delivery not found")

// ErrInvalidCursor is returned (wrapped) for a page cursor Reader did not
// make.
var ErrInvalidCursor = errors.New("deliverylog: invalid cursor")

// Delivery is one delivery's logged attempts.
type Delivery struct {
	DeliveryID   string    `json:"delivery_id"`
	Subscription string    `json:"subscription_id"`
	Topic        string    `json:"topic"`
	Partition    int32     `json:"partition"`
	Offset       int64     `json:"offset"`
	Attempts     []Attempt `json:"attempts"`
}

// Summary is one delivery of a list: its record and its latest attempt.
type Summary struct {
	DeliveryID string  `json:"delivery_id"`
	Topic      string  `json:"topic"`
	Partition  int32   `json:"partition"`
	Offset     int64   `json:"offset"`
	Attempts   int64   `json:"attempts"`
	Last       Attempt `json:"last_attempt"`
}

// Page is one page of a list, newest first.
type Page struct {
	// Items is never nil.
	Items []Summary `json:"items"`
	// NextCursor continues after the last item; "" when there is nothing
	// more.
	NextCursor string `json:"next_cursor,omitempty"`
}

// Reader reads the log.
type Reader struct {
	rdb  redis.UniversalClient
	keys keyspace.Keyspace
}

// NewReader builds a Reader over rdb.
func NewReader(rdb redis.UniversalClient, keys keyspace.Keyspace) *Reader {
	return &Reader{rdb: rdb, keys: keys}
}

// Get returns the logged attempts of one delivery of the subscription,
// oldest first; an error wrapping ErrNotFound when there are none.
func (r *Reader) Get(ctx context.Context, subscriptionID, deliveryID string) (*Delivery, error) {
	raw, err := r.rdb.LRange(ctx, r.keys.DeliveryAttempts(subscriptionID, deliveryID), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("deliverylog: get %s: %w", deliveryID, err)
	}
	if len(raw) == 0 {
		return nil, fmt.Errorf("deliverylog: get %s: %w", deliveryID, ErrNotFound)
	}
	d := &Delivery{DeliveryID: deliveryID, Subscription: subscriptionID, Attempts: make([]Attempt, 0, len(raw))}
	for _, s := range raw {
		var st stored
		if err := json.Unmarshal([]byte(s), &st); err != nil {
			return nil, fmt.Errorf("deliverylog: get %s: %w", deliveryID, err)
		}
		d.Topic, d.Partition, d.Offset = st.Topic, st.Partition, st.Offset
		d.Attempts = append(d.Attempts, st.Attempt)
	}
	return d, nil
}

// List returns the subscription's logged deliveries after cursor ("" for
// the first page), newest latest attempt first, at most limit: those with
// a failed attempt when failed, else all. A cursor is a position (time
// and id), so deliveries logged between two pages neither repeat nor skip
// others; one whose latest attempt moves comes again at its new place.
func (r *Reader) List(ctx context.Context, subscriptionID string, failed bool, limit int, cursor string) (*Page, error) {
	key := r.keys.DeliveryRecent(subscriptionID)
	if failed {
		key = r.keys.DeliveryFailed(subscriptionID)
	}
	maxScore, afterID := "+inf", ""
	if cursor != "" {
		score, id, err := decodeCursor(cursor)
		if err != nil {
			return nil, err
		}
		maxScore, afterID = strconv.FormatInt(score, 10), id
	}
	page := &Page{Items: []Summary{}}
	var ids []redis.Z
	offset := int64(0)
	for len(ids) < limit+1 {
		zs, err := r.rdb.ZRevRangeByScoreWithScores(ctx, key, &redis.ZRangeBy{Max: maxScore, Min: "-inf", Offset: offset, Count: int64(limit + 1)}).Result()
		if err != nil {
			return nil, fmt.Errorf("deliverylog: list: %w", err)
		}
		offset += int64(len(zs))
		for _, z := range zs {
			id, _ := z.Member.(string)
			// Equal scores come in reverse id order: those at the cursor's
			// time up to and including its id were on earlier pages.
			if afterID != "" && strconv.FormatInt(int64(z.Score), 10) == maxScore && id >= afterID {
				continue
			}
			ids = append(ids, z)
		}
		if len(zs) < limit+1 {
			break
		}
	}
	more := len(ids) > limit
	if more {
		ids = ids[:limit]
	}
	if len(ids) == 0 {
		return page, nil
	}
	lasts := make([]*redis.StringSliceCmd, len(ids))
	lens := make([]*redis.IntCmd, len(ids))
	_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, z := range ids {
			k := r.keys.DeliveryAttempts(subscriptionID, z.Member.(string))
			lasts[i] = p.LRange(ctx, k, -1, -1)
			lens[i] = p.LLen(ctx, k)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("deliverylog: list: %w", err)
	}
	for i, z := range ids {
		last := lasts[i].Val()
		if len(last) == 0 {
			continue // expired since it was indexed
		}
		var st stored
		if err := json.Unmarshal([]byte(last[0]), &st); err != nil {
			return nil, fmt.Errorf("deliverylog: list: %w", err)
		}
		page.Items = append(page.Items, Summary{DeliveryID: z.Member.(string), Topic: st.Topic, Partition: st.Partition, Offset: st.Offset,
			Attempts: lens[i].Val(), Last: st.Attempt})
	}
	if more {
		z := ids[len(ids)-1]
		page.NextCursor = encodeCursor(int64(z.Score), z.Member.(string))
	}
	return page, nil
}

// DeleteSubscription removes a deleted subscription's log
// (control.StateDeleter): its index and every list it names.
func (r *Reader) DeleteSubscription(ctx context.Context, subscriptionID string) error {
	recent := r.keys.DeliveryRecent(subscriptionID)
	for {
		ids, err := r.rdb.ZRange(ctx, recent, 0, 999).Result()
		if err != nil {
			return fmt.Errorf("deliverylog: delete the log of %s: %w", subscriptionID, err)
		}
		if len(ids) == 0 {
			break
		}
		keys := make([]string, 0, len(ids))
		members := make([]any, 0, len(ids))
		for _, id := range ids {
			keys = append(keys, r.keys.DeliveryAttempts(subscriptionID, id))
			members = append(members, id)
		}
		if _, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Unlink(ctx, keys...)
			p.ZRem(ctx, recent, members...)
			return nil
		}); err != nil {
			return fmt.Errorf("deliverylog: delete the log of %s: %w", subscriptionID, err)
		}
	}
	if err := r.rdb.Unlink(ctx, recent, r.keys.DeliveryFailed(subscriptionID)).Err(); err != nil {
		return fmt.Errorf("deliverylog: delete the log of %s: %w", subscriptionID, err)
	}
	return nil
}

func encodeCursor(score int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(score, 10) + "/" + id))
}

func decodeCursor(c string) (int64, string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, "", fmt.Errorf("%w: %q", ErrInvalidCursor, c)
	}
	s, id, ok := strings.Cut(string(raw), "/")
	score, err := strconv.ParseInt(s, 10, 64)
	if !ok || err != nil || id == "" || score < 0 || score > time.Now().Add(24*time.Hour).UnixMilli()*10 {
		return 0, "", fmt.Errorf("%w: %q", ErrInvalidCursor, c)
	}
	return score, id, nil
}
