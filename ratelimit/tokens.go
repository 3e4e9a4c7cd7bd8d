package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keyhook/keyhook/internal/keyspace"
	"github.com/keyhook/keyhook/subscription"
)

// takeScript takes up to want whole tokens of a GCRA limit, on the Redis
// clock so that nodes' clocks do not matter.
//
// KEYS[1]: the limit's state (keyspace.RateLimit): the theoretical
// arrival time (TAT) of the next request, in microseconds.
// ARGV[1]: the emission interval, microseconds per token (1e6/rate,
// rounded up so the rate is never exceeded).
// ARGV[2]: the burst, tokens.
// ARGV[3]: want, tokens (>= 1).
// Result: {granted, next}: granted tokens (0..want); next, when fewer
// than want, the microseconds until one more is due, else 0.
var takeScript = redis.NewScript(`
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local avail = math.floor((now + burst * interval - tat) / interval)
local n = math.min(want, math.max(avail, 0))
tat = tat + n * interval
if n > 0 then
  redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', math.ceil((tat - now) / 1000) + 1)
end
local next = 0
if n < want then
  next = math.max(tat + interval - burst * interval - now, 1)
end
return {n, math.ceil(next)}
`)

// Tokens hands out the tokens of subscriptions' rate limits from Redis;
// it implements dispatcher.RateTokens. Safe for concurrent use.
type Tokens struct {
	rdb  redis.UniversalClient
	keys keyspace.Keyspace
}

// New returns the tokens of the limits kept in rdb under prefix ("" is
// keyspace.DefaultPrefix).
func New(rdb redis.UniversalClient, prefix string) (*Tokens, error) {
	if rdb == nil {
		return nil, errors.New("ratelimit: nil redis client")
	}
	ks := keyspace.Keyspace{Prefix: prefix}
	if err := ks.Validate(); err != nil {
		return nil, fmt.Errorf("ratelimit: %w", err)
	}
	return &Tokens{rdb: rdb, keys: ks}, nil
}

// Take grants up to want tokens of the subscription's limit, and when it
// grants fewer, how long until the next one is due.
func (t *Tokens) Take(ctx context.Context, id string, limit subscription.RateLimit, want int) (int, time.Duration, error) {
	if !limit.Enabled() || want < 1 {
		return 0, 0, fmt.Errorf("ratelimit: take %d tokens of %+v", want, limit)
	}
	interval := (1_000_000 + int64(limit.PerSecond) - 1) / int64(limit.PerSecond)
	res, err := takeScript.Run(ctx, t.rdb, []string{t.keys.RateLimit(id)}, interval, limit.BurstOrDefault(), want).Int64Slice()
	if err != nil {
		return 0, 0, fmt.Errorf("ratelimit: take: %w", err)
	}
	if len(res) != 2 {
		return 0, 0, fmt.Errorf("ratelimit: take: the script answered %v", res)
	}
	return int(res[0]), time.Duration(res[1]) * time.Microsecond, nil
}
