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

// restoreScript writes a token from the config log unless Redis holds it
// at the same version or above, or holds a newer token under its name.
// An older token under its name is replaced (and so revoked).
//
// KEYS[1]: the tokens hash (keyspace.Tokens).
// KEYS[2]: the names hash (keyspace.TokenNames).
// KEYS[3]: the last-used hash (keyspace.TokenLastUsed).
// ARGV[1]: the token hash.
// ARGV[2]: the name.
// ARGV[3]: the Token JSON.
// ARGV[4]: the version to restore.
// Result: 1 if stored, 0 otherwise (nothing changed).
var restoreScript = redis.NewScript(`
local function version(rec)
  return tonumber(cjson.decode(rec)['version']) or 0
end
local want = tonumber(ARGV[4])
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur and version(cur) >= want then
  return 0
end
local other = redis.call('HGET', KEYS[2], ARGV[2])
if other and other ~= ARGV[1] then
  local rec = redis.call('HGET', KEYS[1], other)
  if rec then
    if version(rec) > want then
      return 0
    end
    redis.call('HDEL', KEYS[1], other)
    redis.call('HDEL', KEYS[3], other)
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
return 1
`)

// removeScript removes a token the config log revoked unless Redis holds
// it at the revocation's version or above.
//
// KEYS[1]: the tokens hash (keyspace.Tokens).
// KEYS[2]: the names hash (keyspace.TokenNames).
// KEYS[3]: the last-used hash (keyspace.TokenLastUsed).
// ARGV[1]: the token hash.
// ARGV[2]: the revocation's version.
// Result: 1 if removed, 0 otherwise (nothing changed).
var removeScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then
  return 0
end
local tok = cjson.decode(cur)
if (tonumber(tok['version']) or 0) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
if redis.call('HGET', KEYS[2], tok['name']) == ARGV[1] then
  redis.call('HDEL', KEYS[2], tok['name'])
end
return 1
`)
