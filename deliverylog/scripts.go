package deliverylog

import "github.com/redis/go-redis/v9"

// writeScript appends a batch of one subscription's attempts and keeps
// the subscription's log within its retention and cap.
//
//	KEYS[1]      the DeliveryRecent zset
//	KEYS[2]      the DeliveryFailed zset
//	KEYS[3..]    the DeliveryAttempts list of each attempt, in ARGV order
//	ARGV[1]      retention, ms
//	ARGV[2]      the cap: most deliveries kept for the subscription
//	ARGV[3]      most attempts kept per delivery
//	ARGV[4]      now, Unix ms
//	ARGV[5]      the DeliveryAttempts prefix, for the deliveries evicted
//	ARGV[6..]    per attempt: delivery id, time (Unix ms), "1" when it
//	             failed else "0", its JSON
//
// Result: how many deliveries the cap evicted. The lists of evicted
// deliveries are named from ARGV[5]; they share the hash tag of KEYS[1],
// so they live in its slot on Redis Cluster.
var writeScript = redis.NewScript(`
local ttl = tonumber(ARGV[1])
local cap = tonumber(ARGV[2])
local keep = tonumber(ARGV[3])
local now = tonumber(ARGV[4])
local prefix = ARGV[5]
local k = 3
for i = 6, #ARGV, 4 do
  local list = KEYS[k]
  k = k + 1
  redis.call('RPUSH', list, ARGV[i+3])
  redis.call('LTRIM', list, -keep, -1)
  redis.call('PEXPIRE', list, ttl)
  redis.call('ZADD', KEYS[1], ARGV[i+1], ARGV[i])
  if ARGV[i+2] == '1' then
    redis.call('ZADD', KEYS[2], ARGV[i+1], ARGV[i])
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - ttl))
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. (now - ttl))
local over = redis.call('ZCARD', KEYS[1]) - cap
if over > 0 then
  local old = redis.call('ZPOPMIN', KEYS[1], over)
  for j = 1, #old, 2 do
    redis.call('UNLINK', prefix .. old[j])
    redis.call('ZREM', KEYS[2], old[j])
  end
else
  over = 0
end
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
return over
`)
