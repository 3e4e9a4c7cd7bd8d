package tracking

import (
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Every script reads the time from the Redis server (TIME) rather than
// taking it from the caller, so "claimed", "updated" and the staleness of
// a claim are measured on one clock whatever the nodes' clocks say.
// Numbers are written with string.format("%d") because Lua's default
// number formatting would switch to exponent notation for large values.
//
// Flush and release run pipelined (Store.FlushMany, Store.ReleaseMany):
// one EVALSHA per partition, many partitions in one round trip. EVALSHA
// needs the script in the server's cache, so the Store loads each script
// before its first pipeline and again when a server answers NOSCRIPT.
// Each script touches one key, so a pipeline of them is valid on Redis
// Cluster whatever slots the keys live in.
//
// Scripts name the HASH's fields as F.<name>, never as literals: F is a
// Lua table that fieldsLua declares at the head of every script from the
// field constants of keys.go, the ones decodeState reads, so a script and
// the decoder cannot disagree on a field's name.

// scriptFields are the entries of F: the Lua name and the Go constant.
var scriptFields = [][2]string{
	{"epoch", fieldEpoch},
	{"gen", fieldGen},
	{"owner", fieldOwner},
	{"acked", fieldAcked},
	{"watermark", fieldWatermark},
	{"fetched", fieldFetched},
	{"committed", fieldCommitted},
	{"pending", fieldPending},
	{"inflight", fieldInFlight},
	{"keys", fieldKeys},
	{"oldest", fieldOldest},
	{"claimed", fieldClaimed},
	{"updated", fieldUpdated},
	{"topicid", fieldTopicID},
}

// fieldsLua is the line that declares F.
var fieldsLua = luaTable("F", scriptFields)

// luaTable returns a Lua line declaring name as a table of string
// constants. Values are quoted as Go quotes them, which Lua reads back the
// same for the plain ASCII names used here.
func luaTable(name string, entries [][2]string) string {
	var b strings.Builder
	b.WriteString("local " + name + " = {")
	for i, e := range entries {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(e[0] + " = " + strconv.Quote(e[1]))
	}
	b.WriteString("}\n")
	return b.String()
}

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
// Offsets mean something only within one incarnation of a topic. When the
// claimer knows the topic's ID and the state was written for another one
// (the topic was deleted and created again under the same name), the
// offset fields are dropped before the claim: the old acked ranges would
// make the new owner skip records of the new topic. The epoch, generation
// and owner stay, so fencing is unchanged. A state without an ID (written
// before IDs were stored) adopts the claimer's.
//
// Input:
// KEYS[1] -> the partition's tracking HASH (keyspace.Partition)
// --
// ARGV[1] -> owner node id
// ARGV[2] -> owner's Kafka group generation
// ARGV[3] -> stale limit in milliseconds
// ARGV[4] -> the topic's ID, "" unknown (nothing is compared or stored)
//
// Output:
// {"ok", epoch, acked (encoded set, "" none), committed mirror, previous owner ("" none), discarded topic ID ("" none)}
// {"fenced", stored generation, stored owner, ms since the last update}
var claimCmd = redis.NewScript(fieldsLua + claimLua)

const claimLua = `
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local h = redis.call("HMGET", KEYS[1], F.epoch, F.gen, F.owner, F.acked, F.committed, F.updated, F.topicid)
local epoch, gen, owner, acked, committed, updated, topicid = h[1], h[2], h[3], h[4], h[5], h[6], h[7]
if gen and tonumber(gen) > tonumber(ARGV[2]) then
	local age = now - (tonumber(updated) or 0)
	if age < tonumber(ARGV[3]) then
		return {"fenced", gen, owner or "", age}
	end
end
local discarded = ""
if ARGV[4] ~= "" then
	if topicid and topicid ~= "" and topicid ~= ARGV[4] then
		redis.call("HDEL", KEYS[1], F.acked, F.watermark, F.fetched, F.committed,
			F.pending, F.inflight, F.keys, F.oldest)
		acked, committed, discarded = nil, nil, topicid
	end
	redis.call("HSET", KEYS[1], F.topicid, ARGV[4])
end
local nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
local e = math.max((tonumber(epoch) or 0) + 1, nowus)
local committedOut = committed or "-1"
redis.call("HSET", KEYS[1],
	F.epoch, string.format("%d", e),
	F.gen, ARGV[2],
	F.owner, ARGV[1],
	F.committed, committedOut,
	F.claimed, string.format("%d", now),
	F.updated, string.format("%d", now))
return {"ok", e, acked or "", committedOut, owner or "", discarded}
`

// flushCmd writes the owner's in-memory state, all fields at once, iff the
// caller still holds the current epoch. Nothing is written otherwise.
//
// Input:
// KEYS[1] -> the partition's tracking HASH (keyspace.Partition)
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
var flushCmd = redis.NewScript(fieldsLua + flushLua)

const flushLua = `
local epoch = redis.call("HGET", KEYS[1], F.epoch)
if not epoch then
	return {"lost"}
end
if epoch ~= ARGV[1] then
	return {"fenced", epoch}
end
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call("HSET", KEYS[1],
	F.acked, ARGV[2],
	F.watermark, ARGV[3],
	F.fetched, ARGV[4],
	F.committed, ARGV[5],
	F.pending, ARGV[6],
	F.inflight, ARGV[7],
	F.oldest, ARGV[8],
	F.keys, ARGV[9],
	F.updated, string.format("%d", now))
return {"ok"}
`

// releaseCmd clears the owner of a partition after a graceful handover,
// iff the caller still holds the current epoch. The epoch stays, so the
// next claim still moves it forward.
//
// Input:
// KEYS[1] -> the partition's tracking HASH (keyspace.Partition)
// --
// ARGV[1] -> owner's epoch
//
// Output:
// {"ok"}
// {"fenced", stored epoch}
// {"lost"}
var releaseCmd = redis.NewScript(fieldsLua + releaseLua)

const releaseLua = `
local epoch = redis.call("HGET", KEYS[1], F.epoch)
if not epoch then
	return {"lost"}
end
if epoch ~= ARGV[1] then
	return {"fenced", epoch}
end
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call("HSET", KEYS[1], F.owner, "", F.updated, string.format("%d", now))
return {"ok"}
`
