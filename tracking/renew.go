package tracking

import (
	"context"
	"fmt"
	"strconv"

	"github.com/keyhook/keyhook/keyrange"
)

// PartitionRenewal is one claim for RenewRanges: the epoch ClaimRanges
// returned and the ranges the claim holds now, as a flush declares them.
type PartitionRenewal struct {
	Key    PartitionKey
	Epoch  int64
	Ranges keyrange.Set
}

// RenewRanges confirms that each claim of rs still holds exactly its
// ranges, as a flush of it would, without writing its state: the claim's
// "updated" time is the only field written. A node renews the ownership
// of its idle partitions this way, all in one round trip, instead of
// waking each partition to flush a state that did not change. Each
// renewal answers on its own, in rs's order: nil when the claim holds,
// ErrFenced when a newer claim took some of its ranges (or it released
// them), ErrStateLost when its key is gone.
func (s *Store) RenewRanges(ctx context.Context, rs []PartitionRenewal) []error {
	out := make([]error, len(rs))
	var keys []string
	var args [][]any
	var idx []int
	for i, r := range rs {
		if err := r.Key.validate(); err != nil {
			out[i] = fmt.Errorf("tracking: renew: %w", err)
			continue
		}
		ranges, err := claimedRanges(r.Ranges)
		if err != nil {
			out[i] = fmt.Errorf("tracking: renew %s: %w", r.Key, err)
			continue
		}
		keys = append(keys, s.key(r.Key))
		args = append(args, []any{r.Epoch, ranges.String()})
		idx = append(idx, i)
	}
	groups := flushGroups(s.rdb, keys)
	calls := make([]scriptCall, len(groups))
	for g, members := range groups {
		c := scriptCall{script: renewCmd, keys: make([]string, 0, len(members)), args: make([]any, 0, len(members)*renewArgs)}
		for _, j := range members {
			c.keys = append(c.keys, keys[j])
			c.args = append(c.args, args[j]...)
		}
		calls[g] = c
	}
	for g, res := range s.runMany(ctx, calls) {
		for k, j := range groups[g] {
			i := idx[j]
			r := rs[i]
			if res.err != nil {
				out[i] = fmt.Errorf("tracking: renew %s: %w", r.Key, res.err)
				continue
			}
			reply, ok := at(res.reply, k).([]any)
			if !ok {
				out[i] = fmt.Errorf("tracking: renew %s: unexpected reply %v of a round of %d", r.Key, at(res.reply, k), len(groups[g]))
				continue
			}
			if status(reply) == "error" {
				out[i] = fmt.Errorf("tracking: renew %s: %v", r.Key, at(reply, 1))
				continue
			}
			out[i] = fencedReply("renew", r.Key, r.Epoch, reply)
		}
	}
	return out
}

// renewArgs is the number of ARGV of one partition's renewal.
const renewArgs = 2

// renewCmd confirms claims as flushCmd would, writing nothing but the
// time: it refuses exactly what flushCmd refuses (a key gone, a HASH of
// the old layout, a claim whose ranges are not the ones declared).
//
// Input:
// KEYS[i] -> the tracking HASH of the i-th partition
// --
// ARGV[(i-1)*2 + 1] -> its claim's epoch
// ARGV[(i-1)*2 + 2] -> its claim's ranges (keyrange.Set.String, normalised)
//
// Output:
// {reply for KEYS[1], ..., for KEYS[n]}, each {"ok"}, {"fenced", stored
// epoch}, {"lost"} or, for a partition whose check raised an error,
// {"error", message}
var renewCmd = newScript(`local NARGS = ` + strconv.Itoa(renewArgs) + `
if #ARGV ~= #KEYS * NARGS then
	return redis.error_reply("renew: " .. #ARGV .. " arguments for " .. #KEYS .. " keys")
end
local function renew(key, e, ranges, now)
	local h = redis.call("HMGET", key, F.epoch, F.pieces, F.gen, cf(e, F.ranges))
	if not h[1] then
		return {"lost"}
	end
	if h[3] or not h[2] or h[4] ~= ranges then
		return {"fenced", h[1]}
	end
	local whole = string.match(h[2], "^0:65536:" .. e .. ":0:%-?%d+$")
	if whole then
		if ranges ~= "0-65536" then
			return {"fenced", h[1]}
		end
	elseif held(parsepieces(h[2]), e) ~= ranges then
		return {"fenced", h[1]}
	end
	redis.call("HSET", key, F.claim .. e .. ":" .. F.updated, now)
	return {"ok"}
end
local now
local out = {}
for i, key in ipairs(KEYS) do
	if not now then
		now = string.format("%d", servertime())
	end
	local ok, r = pcall(renew, key, ARGV[2 * i - 1], ARGV[2 * i], now)
	if ok then
		out[i] = r
	else
		out[i] = {"error", type(r) == "table" and r.err or tostring(r)}
	end
end
return out
`)
