package subscription

import "github.com/redis/go-redis/v9"

// Every change to the set is one script, so that storing and announcing it
// cannot be separated: a node that hears of a change always finds it
// stored, and a stored change is always announced (Watch's resync covers
// the announcements Pub/Sub itself loses).

// createScript stores a new subscription unless its id is taken.
//
// KEYS[1]: the subscriptions hash.
// ARGV[1]: the subscription id.
// ARGV[2]: the subscription JSON.
// ARGV[3]: the change channel.
// Result: 1 if stored and published, 0 if the id already exists (nothing
// changed).
var createScript = redis.NewScript(`
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then
  return 0
end
redis.call('PUBLISH', ARGV[3], ARGV[1])
return 1
`)

// deleteScript removes a subscription.
//
// KEYS[1]: the subscriptions hash.
// ARGV[1]: the subscription id.
// ARGV[2]: the change channel.
// Result: 1 if removed and published, 0 if there was no such id (nothing
// changed).
var deleteScript = redis.NewScript(`
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('PUBLISH', ARGV[2], ARGV[1])
return 1
`)
