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
// Release runs pipelined (Store.ReleaseMany): one EVALSHA per partition,
// many partitions in one round trip. A flush round goes further: one
// EVALSHA of flushRoundCmd writes every partition of the round whose keys
// may share a script (all of them on a single server, those of one slot
// on Redis Cluster), and the calls of the round are pipelined. EVALSHA
// needs the script in the server's cache, so the Store loads each script
// before its first pipeline and again when a server answers NOSCRIPT.
// Every other script touches one key, so a pipeline of them is valid on
// Redis Cluster whatever slots the keys live in.
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
	{"holding", fieldHolding},
	{"stalled", fieldStalled},
	{"claimed", fieldClaimed},
	{"updated", fieldUpdated},
	{"topicid", fieldTopicID},
	{"pieces", fieldPieces},
	{"ranges", fieldRanges},
	{"claim", claimPrefix},
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

// newScript declares F and the helpers of libLua ahead of body.
func newScript(body string) *redis.Script {
	return redis.NewScript(fieldsLua + libLua + body)
}

// libLua holds what every script shares: the layout of pieces and claims.
//
// The hash space [0, 65536) is cut into pieces, kept in one field (F.pieces)
// as "lo:hi:epoch:released:watermark" joined by commas, in hash order. A
// piece belongs to the claim of its epoch (0: never claimed); released
// marks a piece its claim gave up, which keeps the claim's acked set for
// the next owner. A piece's watermark is a fact about its hashes: every
// record below it whose hash is in the piece was delivered (-1: nothing
// known). Watermarks only grow; the partition's merged watermark is their
// minimum.
//
// A claim's fields are F.claim .. epoch .. ":" .. name (cf). The claim
// holds the hashes of its unreleased pieces (held), and F.ranges says
// which hashes it declared: once a newer claim takes one of its pieces the
// two differ, and the claim is fenced for good. A claim no piece refers to
// is deleted.
//
// Epochs stay strings in the scripts (compared, concatenated), and are
// numbers only to compute the next one. Lua numbers are doubles: epochs
// (µs since 1970) and offsets stay far below 2^53.
const libLua = `
local function servertime()
	local t = redis.call("TIME")
	return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), tonumber(t[1]) * 1000000 + tonumber(t[2])
end
-- The lists of fields are built on demand: a table built on every run
-- would cost the hot flush for nothing.
local function claimnames()
	return {F.owner, F.gen, F.ranges, F.acked, F.fetched, F.pending, F.inflight, F.keys, F.oldest, F.claimed, F.updated, F.holding, F.stalled}
end
local function offsetnames()
	return {F.acked, F.fetched, F.pending, F.inflight, F.keys, F.oldest, F.holding, F.stalled}
end
local function cf(e, name)
	return F.claim .. e .. ":" .. name
end
local function claimfields(e, names)
	local out = {}
	for i, name in ipairs(names) do
		out[i] = cf(e, name)
	end
	return out
end
local function parsepieces(s)
	local ps = {}
	for lo, hi, e, r, w in string.gmatch(s, "(%d+):(%d+):(%d+):([01]):(%-?%d+)") do
		ps[#ps + 1] = {lo = tonumber(lo), hi = tonumber(hi), e = e, rel = r == "1", wm = tonumber(w)}
	end
	return ps
end
local function encodepieces(ps)
	local out, prev = {}, nil
	for _, p in ipairs(ps) do
		if prev and prev.e == p.e and prev.rel == p.rel and prev.wm == p.wm and prev.hi == p.lo then
			prev.hi = p.hi
		else
			prev = {lo = p.lo, hi = p.hi, e = p.e, rel = p.rel, wm = p.wm}
			out[#out + 1] = prev
		end
	end
	for i, p in ipairs(out) do
		out[i] = string.format("%d:%d:%s:%d:%d", p.lo, p.hi, p.e, p.rel and 1 or 0, p.wm)
	end
	return table.concat(out, ",")
end
local function parseranges(s)
	local rs = {}
	for lo, hi in string.gmatch(s, "(%d+)%-(%d+)") do
		rs[#rs + 1] = {lo = tonumber(lo), hi = tonumber(hi)}
	end
	return rs
end
-- held is the hashes of e's unreleased pieces as keyrange.Set.String
-- writes them.
local function held(ps, e)
	local out, lo, hi = {}, nil, nil
	for _, p in ipairs(ps) do
		if p.e == e and not p.rel then
			if hi == p.lo then
				hi = p.hi
			else
				if lo then
					out[#out + 1] = string.format("%d-%d", lo, hi)
				end
				lo, hi = p.lo, p.hi
			end
		end
	end
	if lo then
		out[#out + 1] = string.format("%d-%d", lo, hi)
	end
	return table.concat(out, ",")
end
-- split cuts the pieces at the bounds of the sorted ranges rs, and
-- replaces each part inside rs by what inside returns for it.
local function split(ps, rs, inside)
	local out = {}
	for _, p in ipairs(ps) do
		local cur = p.lo
		for _, r in ipairs(rs) do
			local lo, hi = math.max(p.lo, r.lo), math.min(p.hi, r.hi)
			if lo < hi then
				if cur < lo then
					out[#out + 1] = {lo = cur, hi = lo, e = p.e, rel = p.rel, wm = p.wm}
				end
				out[#out + 1] = inside({lo = lo, hi = hi, e = p.e, rel = p.rel, wm = p.wm})
				cur = hi
			end
		end
		if cur < p.hi then
			out[#out + 1] = {lo = cur, hi = p.hi, e = p.e, rel = p.rel, wm = p.wm}
		end
	end
	return out
end
`

// claimCmd makes a node the owner of some hash ranges of a partition
// under a new epoch.
//
// The claim is refused when one of the pieces it would take belongs to a
// live (unreleased) claim whose generation is newer than the claimer's
// and which was updated less than the stale limit ago: a zombie from an
// older generation cannot steal ranges back, yet a generation that
// restarts low (the consumer group expired and was recreated) cannot
// stall the partition for longer than the limit. Otherwise the pieces are
// cut at the ranges' bounds and the parts inside become the new claim's,
// keeping their watermarks (the floors the claim answers). The claims it
// took pieces from answer their acked sets, and the new claim stores the
// one set when there is only one (a takeover of a whole claim); the
// caller seeds the union of several (seedCmd).
//
// A HASH of the layout before range claims is upgraded first, even when
// the claim is then refused: that rewrites how the state is stored, not
// what it says. This is the one script that upgrades: an owner's first
// touch of a partition's state is its claim, and the other scripts take
// the old layout for the claim of an older node (see flushCmd).
//
// The new epoch is max(stored epoch + 1, now in µs). Taking the clock
// into account keeps epochs increasing even after Redis lost the key: a
// plain counter would restart at 1 and could hand a new owner the very
// epoch a zombie still holds.
//
// Offsets mean something only within one incarnation of a topic. When the
// claimer knows the topic's ID and the state was written for another one
// (the topic was deleted and created again under the same name), the
// offsets of every claim and piece are dropped before the claim: the old
// acked ranges would make the new owner skip records of the new topic.
// Epochs, generations and owners stay, so fencing is unchanged. A state
// without an ID (written before IDs were stored) adopts the claimer's.
//
// Input:
// KEYS[1] -> the partition's tracking HASH (keyspace.Partition)
// --
// ARGV[1] -> owner node id
// ARGV[2] -> owner's Kafka group generation
// ARGV[3] -> stale limit in milliseconds
// ARGV[4] -> the topic's ID, "" unknown (nothing is compared or stored)
// ARGV[5] -> the ranges claimed (keyrange.Set.String, normalised, not empty)
//
// Output:
// {"ok", epoch, {acked sets of the claims taken from}, committed mirror, previous owner ("" none), discarded topic ID ("" none), {lo, hi, watermark, ...}}
// {"fenced", stored generation, stored owner, ms since the last update}
var claimCmd = newScript(upgradeLua + claimLua)

// upgradeLua declares upgrade(key), claimCmd's alone.
const upgradeLua = `
-- upgrade rewrites a HASH that holds a claim of the layout before range
-- claims (gen, owner, acked, watermark... at the top, written by an older
-- keyhook) as one claim of the whole space under the stored epoch, its
-- acked set kept. An older node's claim over this layout leaves the same
-- top fields: it claimed the whole space, so it takes every piece (their
-- claims are deleted, and fenced), and keeps the least of their
-- watermarks, a fact for every hash. The commit mirror is one too: a
-- claim that never flushed has no watermark yet.
local function upgrade(key)
	local LEGACY = {F.owner, F.gen, F.acked, F.fetched, F.pending, F.inflight, F.keys, F.oldest, F.claimed, F.updated}
	local h = redis.call("HMGET", key, F.epoch, F.pieces, F.watermark, F.committed, unpack(LEGACY))
	local e, wm = h[1] or "0", math.max(tonumber(h[3]) or -1, tonumber(h[4]) or -1)
	if h[2] then
		local floor = nil
		for _, p in ipairs(parsepieces(h[2])) do
			floor = math.min(floor or p.wm, p.wm)
			if p.e ~= "0" and p.e ~= e then
				redis.call("HDEL", key, unpack(claimfields(p.e, claimnames())))
			end
		end
		wm = math.max(wm, floor or -1)
	end
	local released = h[5] == nil or h[5] == ""
	local set = {}
	for i, name in ipairs(LEGACY) do
		if h[4 + i] then
			set[#set + 1] = cf(e, name)
			set[#set + 1] = h[4 + i]
		end
	end
	set[#set + 1] = cf(e, F.ranges)
	set[#set + 1] = released and "" or "0-65536"
	set[#set + 1] = F.pieces
	set[#set + 1] = string.format("0:65536:%s:%d:%d", e, released and 1 or 0, wm)
	redis.call("HDEL", key, F.watermark, unpack(LEGACY))
	redis.call("HSET", key, unpack(set))
end
`

const claimLua = `
local now, nowus = servertime()
if redis.call("HEXISTS", KEYS[1], F.gen) == 1 then
	upgrade(KEYS[1])
end
local h = redis.call("HMGET", KEYS[1], F.epoch, F.pieces, F.committed, F.topicid)
local ps = {{lo = 0, hi = 65536, e = "0", rel = false, wm = -1}}
if h[2] then
	ps = parsepieces(h[2])
end
local rs = parseranges(ARGV[5])
local checked = {}
for _, p in ipairs(ps) do
	if p.e ~= "0" and not p.rel and not checked[p.e] then
		for _, r in ipairs(rs) do
			if math.max(p.lo, r.lo) < math.min(p.hi, r.hi) then
				checked[p.e] = true
				local c = redis.call("HMGET", KEYS[1], cf(p.e, F.gen), cf(p.e, F.updated), cf(p.e, F.owner))
				if c[1] and tonumber(c[1]) > tonumber(ARGV[2]) then
					local age = now - (tonumber(c[2]) or 0)
					if age < tonumber(ARGV[3]) then
						return {"fenced", c[1], c[3] or "", age}
					end
				end
				break
			end
		end
	end
end
local committed, discarded = h[3], ""
if ARGV[4] ~= "" then
	if h[4] and h[4] ~= "" and h[4] ~= ARGV[4] then
		local dropped = {}
		for _, p in ipairs(ps) do
			p.wm = -1
			if p.e ~= "0" and not dropped[p.e] then
				dropped[p.e] = true
				redis.call("HDEL", KEYS[1], unpack(claimfields(p.e, offsetnames())))
			end
		end
		redis.call("HDEL", KEYS[1], F.committed)
		committed, discarded = nil, h[4]
	end
	redis.call("HSET", KEYS[1], F.topicid, ARGV[4])
end
local epoch = math.max((tonumber(h[1]) or 0) + 1, nowus)
local e = string.format("%d", epoch)
local floors, sources, seen, prev = {}, {}, {}, nil
ps = split(ps, rs, function(p)
	floors[#floors + 1] = p.lo
	floors[#floors + 1] = p.hi
	floors[#floors + 1] = p.wm
	if p.e ~= "0" then
		if not seen[p.e] then
			seen[p.e] = true
			sources[#sources + 1] = p.e
		end
		if not prev and not p.rel then
			prev = redis.call("HGET", KEYS[1], cf(p.e, F.owner))
		end
	end
	return {lo = p.lo, hi = p.hi, e = e, rel = false, wm = p.wm}
end)
local left = {}
for _, p in ipairs(ps) do
	left[p.e] = true
end
local acked = {}
for _, src in ipairs(sources) do
	local a = redis.call("HGET", KEYS[1], cf(src, F.acked))
	if a and a ~= "" then
		acked[#acked + 1] = a
	end
	if not left[src] then
		redis.call("HDEL", KEYS[1], unpack(claimfields(src, claimnames())))
	end
end
local stamp = string.format("%d", now)
redis.call("HSET", KEYS[1],
	F.epoch, e,
	F.pieces, encodepieces(ps),
	cf(e, F.owner), ARGV[1],
	cf(e, F.gen), ARGV[2],
	cf(e, F.ranges), ARGV[5],
	cf(e, F.claimed), stamp,
	cf(e, F.updated), stamp)
if #acked == 1 then
	redis.call("HSET", KEYS[1], cf(e, F.acked), acked[1])
end
return {"ok", epoch, acked, committed or "-1", prev or "", discarded, floors}
`

// seedCmd stores the union of the acked sets a claim took over from
// several claims, unless the claim is gone or has flushed its own since.
//
// Input:
// KEYS[1] -> the partition's tracking HASH (keyspace.Partition)
// --
// ARGV[1] -> the claim's epoch
// ARGV[2] -> the acked offsets (offsets.Set encoding)
//
// Output:
// {"ok"}
var seedCmd = newScript(seedLua)

const seedLua = `
if redis.call("HEXISTS", KEYS[1], cf(ARGV[1], F.ranges)) == 1 then
	redis.call("HSETNX", KEYS[1], cf(ARGV[1], F.acked), ARGV[2])
end
return {"ok"}
`

// flushCmd writes a claim's in-memory state iff the claim still holds
// exactly the ranges it declares. Nothing is written otherwise.
//
// A HASH of the layout before range claims (F.gen at the top) is refused
// as fenced whatever the epoch: every claim of this code upgraded it, so
// it was written since by an older node's claim, which took the whole
// space. Only claimCmd upgrades it.
//
// Each of the claim's pieces takes the claim's watermark if higher, and
// every piece the Kafka commit if higher: both are facts, so a max of
// them is one too, and no piece's watermark ever goes back. The reply
// carries the merged watermark (the least of the pieces') and the commit
// mirror, which only grows.
//
// One piece of the whole space, the layout of every partition with one
// sharer, costs one HMGET of five fields and one HSET: the other claims'
// fields are never read.
//
// Input:
// KEYS[1] -> the partition's tracking HASH (keyspace.Partition)
// --
// ARGV[1] -> the claim's epoch
// ARGV[2] -> the claim's ranges (keyrange.Set.String, normalised)
// ARGV[3] -> acked offsets at or above the watermark (offsets.Set encoding)
// ARGV[4] -> watermark of the claim's ranges
// ARGV[5] -> fetched (next offset to fetch)
// ARGV[6] -> committed mirror (-1 none)
// ARGV[7] -> pending count
// ARGV[8] -> in-flight count
// ARGV[9] -> dispatch time of the oldest pending record, unix ms (0 none)
// ARGV[10] -> keys with a record in flight or queued
// ARGV[11] -> the record holding the watermark (Holding as JSON), "" none
// ARGV[12] -> the claim's keys not flowing (StalledKeys as JSON), "" keeps
// the stored ones: the list changes seldom, and is written when it does
//
// Output:
// {"ok", merged watermark, committed mirror}
// {"fenced", stored epoch}  the claim lost ranges to a newer one, or is gone
// {"lost"}                  the key is gone (Redis lost its data)
var flushCmd = newScript(flushFuncLua + `return flush(KEYS[1], ARGV, servertime)`)

// flushArgs is the number of ARGV of one partition's flush.
const flushArgs = 12

// flushRoundCmd is flushCmd over several partitions of one round, in one
// call: a node's round costs one command and one TIME, however many
// partitions it owns. Each partition is flushed exactly as flushCmd does
// and answers on its own: one fenced, lost or broken (a Redis error, such
// as a key of the wrong type) does not stop the others. The keys must
// share a slot on Redis Cluster.
//
// Input:
// KEYS[i] -> the tracking HASH of the round's i-th partition
// --
// ARGV[(i-1)*12 + 1 .. i*12] -> the i-th partition's ARGV of flushCmd
//
// Output:
// {reply of flushCmd for KEYS[1], ..., for KEYS[n]}, and for a partition
// whose flush raised an error {"error", message}
var flushRoundCmd = newScript(flushFuncLua + flushRoundLua)

// flushFuncLua declares flush(key, a, clock), the body of flushCmd over
// one key: a holds the twelve arguments flushCmd documents, clock answers
// the server time in ms (servertime, or the round's one reading).
const flushFuncLua = `
local function flush(key, a, clock)
	local e = a[1]
	local h = redis.call("HMGET", key, F.epoch, F.pieces, F.gen, F.committed, cf(e, F.ranges))
	if not h[1] then
		return {"lost"}
	end
	if h[3] or not h[2] or h[5] ~= a[2] then
		return {"fenced", h[1]}
	end
	local wm, c = tonumber(a[4]), tonumber(a[6])
	local committed = math.max(tonumber(h[4]) or -1, c)
	local pieces, merged
	-- The claim of the whole space, one piece, is every partition with one
	-- sharer: it skips the general parsing.
	local whole = string.match(h[2], "^0:65536:" .. e .. ":0:(%-?%d+)$")
	if whole then
		if a[2] ~= "0-65536" then
			return {"fenced", h[1]}
		end
		merged = math.max(tonumber(whole), wm, c)
		pieces = "0:65536:" .. e .. ":0:" .. string.format("%d", merged)
	else
		local ps = parsepieces(h[2])
		if held(ps, e) ~= a[2] then
			return {"fenced", h[1]}
		end
		for _, p in ipairs(ps) do
			if p.e == e and not p.rel then
				p.wm = math.max(p.wm, wm)
			end
			p.wm = math.max(p.wm, c)
			merged = math.min(merged or p.wm, p.wm)
		end
		pieces = encodepieces(ps)
	end
	local now = clock()
	local pre = F.claim .. e .. ":"
	redis.call("HSET", key,
		F.pieces, pieces,
		F.committed, string.format("%d", committed),
		pre .. F.acked, a[3],
		pre .. F.fetched, a[5],
		pre .. F.pending, a[7],
		pre .. F.inflight, a[8],
		pre .. F.oldest, a[9],
		pre .. F.holding, a[11],
		pre .. F.keys, a[10],
		pre .. F.updated, string.format("%d", now))
	if a[12] ~= "" then
		redis.call("HSET", key, pre .. F.stalled, a[12])
	end
	return {"ok", merged, committed}
end
`

// flushRoundLua reads TIME once, at the round's first write: every
// partition of the round is stamped with one instant, as if flushed
// together. pcall keeps a partition's error its own; its writes made
// before the error stay, as they would in flushCmd.
var flushRoundLua = `local NARGS = ` + strconv.Itoa(flushArgs) + `
if #ARGV ~= #KEYS * NARGS then
	return redis.error_reply("flush round: " .. #ARGV .. " arguments for " .. #KEYS .. " keys")
end
local stamp
local function clock()
	if not stamp then
		stamp = servertime()
	end
	return stamp
end
local out = {}
for i, key in ipairs(KEYS) do
	local base = (i - 1) * NARGS
	local ok, r = pcall(flush, key, {unpack(ARGV, base + 1, base + NARGS)}, clock)
	if ok then
		out[i] = r
	else
		out[i] = {"error", type(r) == "table" and r.err or tostring(r)}
	end
end
return out
`

// releaseCmd gives up ranges of a claim after its owner drained them,
// iff the claim still holds exactly the ranges it declares and holds every
// hash to release. The released pieces keep their watermarks and the
// claim's acked set for the next owner; the claim's declared ranges
// shrink. A HASH of the layout before range claims is refused as flushCmd
// refuses it.
//
// Releasing every range marks the claim's pieces released and keeps the
// claim, which will not change any more. Releasing some ranges moves them
// to a released claim of a new epoch holding a copy of the claim's acked
// set: the claim goes on acking and trimming its set below its own
// watermark, which no longer covers the released ranges, and the offsets
// it acked in them must stay for their next owner. A claim left with no
// piece is deleted, as any claim no piece refers to.
//
// Input:
// KEYS[1] -> the partition's tracking HASH (keyspace.Partition)
// --
// ARGV[1] -> the claim's epoch
// ARGV[2] -> the ranges to release (keyrange.Set.String), "*" all of them
//
// Output:
// {"ok"}
// {"fenced", stored epoch}
// {"lost"}
var releaseCmd = newScript(releaseLua)

const releaseLua = `
local e = ARGV[1]
local h = redis.call("HMGET", KEYS[1], F.epoch, F.pieces, F.gen, cf(e, F.ranges))
if not h[1] then
	return {"lost"}
end
if h[3] or not h[2] or not h[4] then
	return {"fenced", h[1]}
end
local ps = parsepieces(h[2])
if held(ps, e) ~= h[4] then
	return {"fenced", h[1]}
end
local now, nowus = servertime()
local stamp = string.format("%d", now)
if ARGV[2] == "*" then
	for _, p in ipairs(ps) do
		if p.e == e then
			p.rel = true
		end
	end
else
	local rs, want, got = parseranges(ARGV[2]), 0, 0
	for _, r in ipairs(rs) do
		want = want + r.hi - r.lo
	end
	local snap = string.format("%d", math.max(tonumber(h[1]) + 1, nowus))
	ps = split(ps, rs, function(p)
		if p.e == e and not p.rel then
			p.e, p.rel = snap, true
			got = got + p.hi - p.lo
		end
		return p
	end)
	if got ~= want then
		return {"fenced", h[1]}
	end
	if got > 0 then
		local c = redis.call("HMGET", KEYS[1], cf(e, F.owner), cf(e, F.gen), cf(e, F.acked), cf(e, F.fetched), cf(e, F.claimed))
		redis.call("HSET", KEYS[1],
			F.epoch, snap,
			cf(snap, F.owner), c[1] or "",
			cf(snap, F.gen), c[2] or "0",
			cf(snap, F.ranges), "",
			cf(snap, F.acked), c[3] or "",
			cf(snap, F.fetched), c[4] or "0",
			cf(snap, F.claimed), c[5] or stamp,
			cf(snap, F.updated), stamp)
	end
end
redis.call("HSET", KEYS[1], F.pieces, encodepieces(ps))
for _, p in ipairs(ps) do
	if p.e == e then
		redis.call("HSET", KEYS[1], cf(e, F.ranges), held(ps, e), cf(e, F.updated), stamp)
		return {"ok"}
	end
end
redis.call("HDEL", KEYS[1], unpack(claimfields(e, claimnames())))
return {"ok"}
`
