package subscription

import (
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Every change to the set is one script, so that storing and announcing it
// cannot be separated: a node that hears of a change always finds it
// stored, and a stored change is always announced (Watch's resync covers
// the announcements Pub/Sub itself loses). Each change also increments
// the set's version (keyspace.SubscriptionsVersion), always the last of
// the script's KEYS: a watcher reads it to tell whether to list the set
// again. The announcement is "<id> <version>", the set's version the
// change made: a watcher that holds the version before it reads that one
// subscription, not the whole set, and one that sees a version skipped
// lists the set (changeOf).
//
// A script that reads a field of a subscription's JSON names it through
// F, a Lua table that fieldsLua declares at the script's head from the
// Go constants below, never as a literal; a test holds the constants to
// the JSON that Create writes.

// versionField is the JSON name of Subscription.Version.
const versionField = "version"

// fieldsLua declares F.
var fieldsLua = "local F = {version = " + strconv.Quote(versionField) + "}\n"

// createScript stores a new subscription unless its id is taken.
//
// KEYS[1]: the subscriptions hash (keyspace.Subscriptions).
// KEYS[last]: the set's version (keyspace.SubscriptionsVersion).
// ARGV[1]: the subscription id.
// ARGV[2]: the subscription JSON.
// ARGV[3]: the change channel (keyspace.SubscriptionsChanged).
// Result: 1 if stored and published, 0 if the id already exists (nothing
// changed). The id holding exactly ARGV[2] already counts as stored: the
// config log's restorer may have written the change first.
var createScript = redis.NewScript(`
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then
  if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then
    return 0
  end
end
local setVersion = redis.call('INCR', KEYS[#KEYS])
redis.call('PUBLISH', ARGV[3], ARGV[1] .. ' ' .. setVersion)
return 1
`)

// createIdempotentScript stores a new subscription together with the
// record of the request that created it, unless a record for the request's
// idempotency key exists already. Both writes happen or neither does, so a
// client repeating a request never creates a second subscription, even
// after a crash between the two.
//
// KEYS[1]: the subscriptions hash (keyspace.Subscriptions).
// KEYS[2]: the idempotency record, a STRING scoped to the caller
// (keyspace.Idempotency).
// KEYS[last]: the set's version (keyspace.SubscriptionsVersion).
// ARGV[1]: the subscription id.
// ARGV[2]: the subscription JSON.
// ARGV[3]: the change channel (keyspace.SubscriptionsChanged).
// ARGV[4]: the record: the request's fingerprint (no newline), "\n", and
// the redacted JSON of the subscription (no secret is ever replayed).
// ARGV[5]: how long the record lives, in milliseconds.
// Result: {1, ""} if stored, recorded and published; {0, ""} if the id
// already exists (nothing changed); {2, record} if a record exists
// (nothing changed). As in createScript, the id holding exactly ARGV[2]
// counts as stored.
var createIdempotentScript = redis.NewScript(`
local rec = redis.call('GET', KEYS[2])
if rec then
  return {2, rec}
end
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then
  if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then
    return {0, ''}
  end
end
redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[5])
local setVersion = redis.call('INCR', KEYS[#KEYS])
redis.call('PUBLISH', ARGV[3], ARGV[1] .. ' ' .. setVersion)
return {1, ''}
`)

// updateScript replaces a stored subscription if its stored version is
// the expected one: the compare-and-set that makes concurrent changes
// safe (the loser gets a version mismatch, never a lost update).
//
// KEYS[1]: the subscriptions hash (keyspace.Subscriptions).
// KEYS[last]: the set's version (keyspace.SubscriptionsVersion).
// ARGV[1]: the subscription id.
// ARGV[2]: the expected stored version.
// ARGV[3]: the new subscription JSON.
// ARGV[4]: the change channel (keyspace.SubscriptionsChanged).
// Result: {1, version} if stored and published; {0, 0} if there is no such
// id; {-1, version} if the stored version is another (nothing changed).
// version is the stored version before the call.
var updateScript = redis.NewScript(fieldsLua + updateLua)

const updateLua = `
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then
  return {0, 0}
end
local v = cjson.decode(cur)[F.version]
if v ~= tonumber(ARGV[2]) then
  return {-1, v}
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
local setVersion = redis.call('INCR', KEYS[#KEYS])
redis.call('PUBLISH', ARGV[4], ARGV[1] .. ' ' .. setVersion)
return {1, v}
`

// deleteScript removes a subscription and marks it deleted for a minute.
//
// KEYS[1]: the subscriptions hash (keyspace.Subscriptions).
// KEYS[2]: the deleted marker (keyspace.SubscriptionDeleted).
// KEYS[last]: the set's version (keyspace.SubscriptionsVersion).
// ARGV[1]: the subscription id.
// ARGV[2]: the change channel (keyspace.SubscriptionsChanged).
// Result: 1 if removed and published, 0 if there was no such id (nothing
// changed).
var deleteScript = redis.NewScript(`
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('SET', KEYS[2], '1', 'EX', 60)
local setVersion = redis.call('INCR', KEYS[#KEYS])
redis.call('PUBLISH', ARGV[2], ARGV[1] .. ' ' .. setVersion)
return 1
`)

// deleteVersionScript removes a subscription if its stored version is the
// expected one, and marks it deleted for a minute.
//
// KEYS[1]: the subscriptions hash (keyspace.Subscriptions).
// KEYS[2]: the deleted marker (keyspace.SubscriptionDeleted).
// KEYS[last]: the set's version (keyspace.SubscriptionsVersion).
// ARGV[1]: the subscription id.
// ARGV[2]: the expected stored version.
// ARGV[3]: the change channel (keyspace.SubscriptionsChanged).
// Result: {1, version} if removed and published; {0, 0} if there is no
// such id; {-1, version} if the stored version is another (nothing
// changed). version is the stored version before the call.
var deleteVersionScript = redis.NewScript(fieldsLua + deleteVersionLua)

const deleteVersionLua = `
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then
  return {0, 0}
end
local v = cjson.decode(cur)[F.version]
if v ~= tonumber(ARGV[2]) then
  return {-1, v}
end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], '1', 'EX', 60)
local setVersion = redis.call('INCR', KEYS[#KEYS])
redis.call('PUBLISH', ARGV[3], ARGV[1] .. ' ' .. setVersion)
return {1, v}
`

// restoreScript writes a subscription from the config log unless Redis
// holds it at the same version or above.
//
// KEYS[1]: the subscriptions hash (keyspace.Subscriptions).
// KEYS[last]: the set's version (keyspace.SubscriptionsVersion).
// ARGV[1]: the subscription id.
// ARGV[2]: the version to restore.
// ARGV[3]: the subscription JSON.
// ARGV[4]: the change channel (keyspace.SubscriptionsChanged).
// Result: 1 if stored and published, 0 if Redis held that version or a
// newer one (nothing changed).
var restoreScript = redis.NewScript(fieldsLua + `
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur and cjson.decode(cur)[F.version] >= tonumber(ARGV[2]) then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
local setVersion = redis.call('INCR', KEYS[#KEYS])
redis.call('PUBLISH', ARGV[4], ARGV[1] .. ' ' .. setVersion)
return 1
`)

// removeScript removes a subscription the config log deleted unless Redis
// holds it at the delete's version or above.
//
// KEYS[1]: the subscriptions hash (keyspace.Subscriptions).
// KEYS[last]: the set's version (keyspace.SubscriptionsVersion).
// ARGV[1]: the subscription id.
// ARGV[2]: the delete's version.
// ARGV[3]: the change channel (keyspace.SubscriptionsChanged).
// Result: 1 if removed and published, 0 otherwise (nothing changed).
var removeScript = redis.NewScript(fieldsLua + `
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur or cjson.decode(cur)[F.version] >= tonumber(ARGV[2]) then
  return 0
end
redis.call('HDEL', KEYS[1], ARGV[1])
local setVersion = redis.call('INCR', KEYS[#KEYS])
redis.call('PUBLISH', ARGV[3], ARGV[1] .. ' ' .. setVersion)
return 1
`)
