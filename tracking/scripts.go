package tracking

import "github.com/redis/go-redis/v9"

// Every script reads the time from the Redis server (TIME) rather than
// taking it from the caller, so "claimed", "updated" and the staleness of
// a claim are measured on one clock whatever the nodes' clocks say.
// Numbers are written with string.format("%d") because Lua's default
// number formatting would switch to exponent notation for large values.

// claimCmd makes a node the owner of a partition under a new epoch.
//
// The claim is refused when the stored generation is newer than the
// claimer's and the state was updated less than the stale limit ago: a
// zombie from an older generation cannot steal the partition back, yet a
// generation that restarts low (the consumer group expired and was
// recreated) cannot stall the partition for longer than the limit.
//
// The new epoch is max(stored epoch + 1, now in µs). Taking the clock
// into account keeps epochs increasing even after Redis lost the key: a
// plain counter would restart at 1 and could hand a new owner the very
// epoch a zombie still holds.
//
// Input:
// KEYS[1] -> <prefix>:track:{<sub>:<topic>:<partition>}
// --
// ARGV[1] -> owner node id
// ARGV[2] -> owner's Kafka group generation
// ARGV[3] -> stale limit in milliseconds
//
// Output:
// {"ok", epoch, acked (encoded set, "" none), committed mirror, previous owner ("" none)}
// {"fenced", stored generation, stored owner, ms since the last update}
var claimCmd = redis.NewScript(`
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local h = redis.call("HMGET", KEYS[1], "epoch", "gen", "owner", "acked", "committed", "updated")
local epoch, gen, owner, acked, committed, updated = h[1], h[2], h[3], h[4], h[5], h[6]
if gen and tonumber(gen) > tonumber(ARGV[2]) then
	local age = now - (tonumber(updated) or 0)
	if age < tonumber(ARGV[3]) then
		return {"fenced", gen, owner or "", age}
	end
end
local nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
local e = math.max((tonumber(epoch) or 0) + 1, nowus)
local committedOut = committed or "-1"
redis.call("HSET", KEYS[1],
	"epoch", string.format("%d", e),
	"gen", ARGV[2],
	"owner", ARGV[1],
	"committed", committedOut,
	"claimed", string.format("%d", now),
	"updated", string.format("%d", now))
return {"ok", e, acked or "", committedOut, owner or ""}
`)

// flushCmd writes the owner's in-memory state, all fields at once, iff the
// caller still holds the current epoch. Nothing is written otherwise.
//
// Input:
// KEYS[1] -> <prefix>:track:{<sub>:<topic>:<partition>}
// --
// ARGV[1] -> owner's epoch
// ARGV[2] -> acked offsets at or above the watermark (offsets.Set encoding)
// ARGV[3] -> watermark
// ARGV[4] -> fetched (next offset to fetch)
// ARGV[5] -> committed mirror (-1 none)
// ARGV[6] -> pending count
// ARGV[7] -> in-flight count
// ARGV[8] -> dispatch time of the oldest pending record, unix ms (0 none)
// ARGV[9] -> keys with a record in flight or queued
//
// Output:
// {"ok"}
// {"fenced", stored epoch}  another owner claimed the partition since
// {"lost"}                  the key is gone (Redis lost its data)
var flushCmd = redis.NewScript(`
local epoch = redis.call("HGET", KEYS[1], "epoch")
if not epoch then
	return {"lost"}
end
if epoch ~= ARGV[1] then
	return {"fenced", epoch}
end
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call("HSET", KEYS[1],
	"acked", ARGV[2],
	"watermark", ARGV[3],
	"fetched", ARGV[4],
	"committed", ARGV[5],
	"pending", ARGV[6],
	"inflight", ARGV[7],
	"oldest", ARGV[8],
	"keys", ARGV[9],
	"updated", string.format("%d", now))
return {"ok"}
`)

// releaseCmd clears the owner of a partition after a graceful handover,
// iff the caller still holds the current epoch. The epoch stays, so the
// next claim still moves it forward.
//
// Input:
// KEYS[1] -> <prefix>:track:{<sub>:<topic>:<partition>}
// --
// ARGV[1] -> owner's epoch
//
// Output:
// {"ok"}
// {"fenced", stored epoch}
// {"lost"}
var releaseCmd = redis.NewScript(`
local epoch = redis.call("HGET", KEYS[1], "epoch")
if not epoch then
	return {"lost"}
end
if epoch ~= ARGV[1] then
	return {"fenced", epoch}
end
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call("HSET", KEYS[1], "owner", "", "updated", string.format("%d", now))
return {"ok"}
`)
