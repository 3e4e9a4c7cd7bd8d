package monitor

import "github.com/redis/go-redis/v9"

// streakScript folds one interval's outcomes of a subscription into its
// failing streak, shared by every node.
//
//	KEYS[1]  the FailingStreak hash
//	ARGV[1]  the last success of the interval, Unix ms; 0 none
//	ARGV[2]  the first failure after it, Unix ms; 0 none
//	ARGV[3]  the key's TTL, ms
//
// Result: the streak's start, Unix ms; 0 when the endpoint is not
// failing. A success ends a streak that began at or before it; a failure
// starts one only after the last success (or resume) any node wrote, so
// nodes that flush out of order still agree.
var streakScript = redis.NewScript(`
local okAt = tonumber(ARGV[1])
local failAt = tonumber(ARGV[2])
local lastOK = tonumber(redis.call('HGET', KEYS[1], 'ok') or '0')
local since = tonumber(redis.call('HGET', KEYS[1], 'since') or '0')
if okAt > 0 then
  if okAt > lastOK then
    lastOK = okAt
    redis.call('HSET', KEYS[1], 'ok', okAt)
  end
  if since > 0 and since <= okAt then
    redis.call('HDEL', KEYS[1], 'since')
    since = 0
  end
end
if failAt > 0 and failAt > lastOK and (since == 0 or failAt < since) then
  since = failAt
  redis.call('HSET', KEYS[1], 'since', since)
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return since
`)

// clearScript ends a subscription's streak at a resume: nothing before
// it may start one again.
//
//	KEYS[1]  the FailingStreak hash
//	ARGV[1]  now, Unix ms
//	ARGV[2]  the key's TTL, ms
//
// Result: 1.
var clearScript = redis.NewScript(`
redis.call('HDEL', KEYS[1], 'since')
redis.call('HSET', KEYS[1], 'ok', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)
