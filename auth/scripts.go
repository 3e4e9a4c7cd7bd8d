package auth

import "github.com/redis/go-redis/v9"

// createScript stores a new token under a name that is not taken.
//
// KEYS[1]: the tokens hash (keyspace.Tokens).
// KEYS[2]: the names hash (keyspace.TokenNames).
// ARGV[1]: the token hash.
// ARGV[2]: the name.
// ARGV[3]: the Token JSON.
// Result: 1 if stored; 0 if the name is taken; -1 if the token hash is
// already stored (nothing changed).
var createScript = redis.NewScript(`
if redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 then
  return 0
end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return -1
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
return 1
`)

// ensureScript makes the name refer to the given token, with the given
// record, replacing (and so revoking) a token the name referred to
// before. A token already stored under the name is left as it is.
//
// KEYS[1]: the tokens hash (keyspace.Tokens).
// KEYS[2]: the names hash (keyspace.TokenNames).
// KEYS[3]: the last-used hash (keyspace.TokenLastUsed).
// ARGV[1]: the token hash.
// ARGV[2]: the name.
// ARGV[3]: the Token JSON.
// Result: 0 if the name already referred to this token (nothing changed);
// 1 if stored under a new name; 2 if stored and the name's previous token
// revoked; -1 if the token is stored under another name (nothing changed).
var ensureScript = redis.NewScript(`
local old = redis.call('HGET', KEYS[2], ARGV[2])
if old == ARGV[1] and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return 0
end
if old ~= ARGV[1] and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return -1
end
local result = 1
if old and old ~= ARGV[1] then
  redis.call('HDEL', KEYS[1], old)
  redis.call('HDEL', KEYS[3], old)
  result = 2
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
return result
`)

// revokeScript removes the token a name refers to.
//
// KEYS[1]: the tokens hash (keyspace.Tokens).
// KEYS[2]: the names hash (keyspace.TokenNames).
// KEYS[3]: the last-used hash (keyspace.TokenLastUsed).
// ARGV[1]: the name.
// Result: 1 if removed, 0 if there is no such name (nothing changed).
var revokeScript = redis.NewScript(`
local h = redis.call('HGET', KEYS[2], ARGV[1])
if not h then
  return 0
end
redis.call('HDEL', KEYS[1], h)
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], h)
return 1
`)
