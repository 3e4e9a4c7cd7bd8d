package ratelimit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
)

// Three takers asking at once, as three nodes would, get at most a burst
// and then the rate between them, on a real redis-server; the key's state
// expires once the limit is full again.
func TestTakersTogetherGetTheRateAndOneBurst(t *testing.T) {
	rdb := testutil.StartRedis(t).Client()
	tokens, err := New(rdb, "")
	if err != nil {
		t.Fatal(err)
	}
	limit := subscription.RateLimit{PerSecond: 100, Burst: 10}
	ctx := context.Background()
	const run = 2 * time.Second
	var granted atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for time.Since(start) < run {
				n, next, err := tokens.Take(ctx, "sub_a", limit, 4)
				if err != nil {
					t.Error(err)
					return
				}
				granted.Add(int64(n))
				if n < 4 {
					time.Sleep(next)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	bound := float64(limit.Burst) + elapsed*float64(limit.PerSecond)
	if got := float64(granted.Load()); got > bound+1 || got < 0.9*bound {
		t.Errorf("three takers got %.0f tokens in %.2fs, want at most the burst and the rate (%.0f) and not far below", got, elapsed, bound)
	}
	if ttl := rdb.PTTL(ctx, "keyhook:ratelimit:{sub_a}").Val(); ttl <= 0 || ttl > time.Second {
		t.Errorf("the limit's key expires in %v, want within the time to refill a burst", ttl)
	}
	if n, _, _ := tokens.Take(ctx, "sub_b", limit, 50); n != limit.Burst {
		t.Errorf("a fresh limit granted %d of 50 at once, want its burst %d", n, limit.Burst)
	}
	if n, next, _ := tokens.Take(ctx, "sub_b", limit, 1); n != 0 || next <= 0 || next > 10*time.Millisecond {
		t.Errorf("a spent limit granted %d, next in %v; want none and one token's interval (10ms)", n, next)
	}
}
