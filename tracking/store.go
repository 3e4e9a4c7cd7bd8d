package tracking

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/keyhook/keyhook/internal/keyspace"
	"github.com/keyhook/keyhook/keyrange"
	"github.com/keyhook/keyhook/tracking/offsets"
	"github.com/redis/go-redis/v9"
)

// ErrFenced means another owner holds the partition: its epoch differs
// from the caller's, or its newer group generation holds a fresh claim.
// The caller has lost the partition and must stop acting on it.
var ErrFenced = errors.New("tracking: fenced by a newer owner")

// ErrStateLost means the partition's key is absent: Redis lost its data
// (a restart without persistence, a flush, an eviction) or the
// subscription was deleted. Nothing was written. The caller may claim the
// partition again and carry on from the Kafka commit; records acked since
// then may be delivered twice, none are lost.
var ErrStateLost = errors.New("tracking: partition state missing")

// Defaults applied to the zero fields of a Config.
const (
	// DefaultPrefix starts every key when Config.Prefix is empty.
	DefaultPrefix = keyspace.DefaultPrefix
	// DefaultStaleClaim is used when Config.StaleClaim is zero.
	DefaultStaleClaim = 2 * time.Minute
)

// Config holds the Store's tunables. The zero value means defaults.
type Config struct {
	// Prefix starts every key the Store writes, so several keyhook
	// installations can share one Redis. It must not contain '{' or '}',
	// which would move the Redis Cluster hash tag. Default "keyhook".
	Prefix string
	// StaleClaim is how long a partition's state must go without a claim,
	// flush or release before a node from an older group generation may
	// claim it. It bounds how long a partition stalls when the group's
	// generation restarts (the group expired and was recreated), and must
	// comfortably exceed the owners' flush interval so a live owner is
	// never mistaken for a dead one. At least a millisecond; default
	// 2 minutes.
	StaleClaim time.Duration
}

// Validate reports the first invalid field of c. Zero fields are valid:
// they mean the default.
func (c Config) Validate() error {
	if err := (keyspace.Keyspace{Prefix: c.Prefix}).Validate(); err != nil {
		return fmt.Errorf("tracking: config: Prefix: %w", err)
	}
	if c.StaleClaim < 0 || (c.StaleClaim > 0 && c.StaleClaim < time.Millisecond) {
		return fmt.Errorf("tracking: config: StaleClaim %v must be 0 (default %v) or at least 1ms", c.StaleClaim, DefaultStaleClaim)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.StaleClaim == 0 {
		c.StaleClaim = DefaultStaleClaim
	}
	return c
}

// Store reads and writes partitions' tracking state in Redis. It is safe
// for concurrent use; it holds no state of its own beyond its
// configuration and which scripts it loaded, so a partition's state is
// only ever what Redis says.
type Store struct {
	rdb     redis.UniversalClient
	keys    keyspace.Keyspace
	staleMS int64

	// scripts are the hashes of the scripts loaded before pipelining.
	scriptsMu sync.Mutex
	scripts   map[string]bool
}

// New returns a Store over rdb, which the caller keeps ownership of (the
// Store never closes it). It returns an error naming the bad field when
// cfg is invalid.
func New(rdb redis.UniversalClient, cfg Config) (*Store, error) {
	if rdb == nil {
		return nil, errors.New("tracking: new: nil redis client")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Store{rdb: rdb, keys: keyspace.Keyspace{Prefix: cfg.Prefix}, staleMS: cfg.StaleClaim.Milliseconds(),
		scripts: make(map[string]bool)}, nil
}

// PartitionKey names one partition of one subscription's topic. The
// subscription id must not contain '{' or '}', and the topic must not
// contain ':', '{' or '}' (Kafka topic names never do).
type PartitionKey struct {
	Subscription string
	Topic        string
	Partition    int32
}

// String returns "subscription/topic/partition", for logs and errors.
func (pk PartitionKey) String() string {
	return pk.Subscription + "/" + pk.Topic + "/" + strconv.FormatInt(int64(pk.Partition), 10)
}

// Claim is what a new owner learns when it claims a partition, or some
// hash ranges of it.
type Claim struct {
	// Epoch identifies this claim; FlushRanges and the releases must
	// present it.
	Epoch int64
	// Acked holds the offsets acked by the claims this one took pieces
	// from (the union of their acked sets, true acks only: records
	// delivered or dead-lettered, gaps, markers). Never nil.
	Acked *offsets.Set
	// Floors are the claimed hash ranges as the stored pieces cut them,
	// in hash order, each with its watermark: every record below it whose
	// hash is in the range was delivered (-1: nothing known).
	Floors []Floor
	// Committed mirrors the last Kafka commit the sharers made, -1 if
	// none.
	Committed int64
	// PrevOwner is the node of a live claim this one took ranges from
	// (the first in hash order), "" if they were released gracefully or
	// nobody ever claimed them.
	PrevOwner string
	// DiscardedTopicID is the topic ID of the offsets the claim dropped
	// because they belonged to an earlier topic of the same name; "" when
	// nothing was dropped.
	DiscardedTopicID string
}

// Floor is a hash range and what is known of it: every record whose hash
// is in Range and whose offset is below Watermark was delivered; -1 means
// nothing is known.
type Floor struct {
	Range     keyrange.Range
	Watermark int64
}

// ClaimRanges makes owner the owner of the given hash ranges of pk
// (keyrange) under a new epoch, whoever held them, and returns what was
// stored of them, so the new owner can skip what was already delivered:
// the acked offsets, the floors and the commit mirror. Nil, empty or
// keyrange.Full() claim the whole partition. Claiming a partition with no
// state creates it.
//
// Fencing is decided per stored piece the ranges overlap: it returns
// ErrFenced, changing nothing, when the piece's live claim has a newer
// generation and was updated less than Config.StaleClaim ago. A node that
// missed a rebalance cannot steal the partition back, but a generation
// reset cannot stall it forever either. A live claim that loses any piece
// to this one is fenced: its next FlushRanges, Release or ReleaseRanges
// returns ErrFenced.
//
// topicID is the topic's Kafka topic ID (KIP-516), "" when the caller
// does not know it (nothing is compared or recorded). Stored offsets of
// another topic ID, left by a topic of the same name that was deleted,
// are dropped instead of returned, for the whole partition (the claim
// reports their ID in DiscardedTopicID), and the state records topicID.
func (s *Store) ClaimRanges(ctx context.Context, pk PartitionKey, owner string, generation int32, topicID string, ranges keyrange.Set) (Claim, error) {
	r := s.ClaimMany(ctx, []PartitionClaim{{Key: pk, Owner: owner, Generation: generation, TopicID: topicID, Ranges: ranges}})[0]
	return r.Claim, r.Err
}

// PartitionClaim is one claim of a ClaimMany round: ClaimRanges'
// arguments.
type PartitionClaim struct {
	Key        PartitionKey
	Owner      string
	Generation int32
	TopicID    string
	Ranges     keyrange.Set
}

// ClaimResult is the outcome of one claim of ClaimMany.
type ClaimResult struct {
	Claim Claim
	// Err is nil when the claim was made; it wraps ErrFenced when a newer
	// claim refused it.
	Err error
}

// ClaimMany makes every claim of cs as ClaimRanges does, pipelined in
// one round trip under ctx's one deadline: a node restarting with
// thousands of partitions claims them at the cost of a few round trips,
// not thousands of connections' worth of waiting for the pool. Each claim
// stands alone (its own script call, its own fencing) and answers in cs's
// order.
func (s *Store) ClaimMany(ctx context.Context, cs []PartitionClaim) []ClaimResult {
	out := make([]ClaimResult, len(cs))
	calls := make([]scriptCall, 0, len(cs))
	idx := make([]int, 0, len(cs))
	for i, pc := range cs {
		if err := pc.Key.validate(); err != nil {
			out[i].Err = fmt.Errorf("tracking: claim: %w", err)
			continue
		}
		if pc.Owner == "" {
			out[i].Err = fmt.Errorf("tracking: claim %s: empty owner", pc.Key)
			continue
		}
		rs, err := claimedRanges(pc.Ranges)
		if err != nil {
			out[i].Err = fmt.Errorf("tracking: claim %s: %w", pc.Key, err)
			continue
		}
		calls = append(calls, scriptCall{script: claimCmd, keys: []string{s.key(pc.Key)},
			args: []any{pc.Owner, pc.Generation, s.staleMS, pc.TopicID, rs.String()}})
		idx = append(idx, i)
	}
	var seeds []scriptCall
	for j, res := range s.runMany(ctx, calls) {
		i := idx[j]
		pc := cs[i]
		if res.err != nil {
			out[i].Err = fmt.Errorf("tracking: claim %s: %w", pc.Key, res.err)
			continue
		}
		switch status(res.reply) {
		case "ok":
			c, blobs, err := decodeClaim(res.reply)
			if err != nil {
				out[i].Err = fmt.Errorf("tracking: claim %s: %w", pc.Key, err)
				continue
			}
			if blobs > 1 {
				// The script stores a single taken-over set itself; a
				// union must be computed here. Until it is stored (or
				// should this write fail) the claim's first flush stores
				// it: the window risks duplicates, never a loss, since the
				// floors are stored.
				seeds = append(seeds, scriptCall{script: seedCmd, keys: []string{s.key(pc.Key)}, args: []any{c.Epoch, c.Acked.AppendBinary(nil)}})
			}
			out[i].Claim = c
		case "fenced":
			out[i].Err = fmt.Errorf("tracking: claim %s with generation %d: %w (generation %v held by %q, updated %vms ago)",
				pc.Key, pc.Generation, ErrFenced, at(res.reply, 1), at(res.reply, 2), at(res.reply, 3))
		default:
			out[i].Err = fmt.Errorf("tracking: claim %s: unexpected script reply %v", pc.Key, res.reply)
		}
	}
	_ = s.runMany(ctx, seeds)
	return out
}

// claimedRanges normalises the ranges of a claim or flush: none means the
// whole space.
func claimedRanges(ranges keyrange.Set) (keyrange.Set, error) {
	if len(ranges) == 0 {
		return keyrange.Full(), nil
	}
	return keyrange.NewSet(ranges...)
}

// decodeClaim reads the claim script's "ok" reply, and says how many
// non-empty acked sets it merged.
func decodeClaim(res []any) (Claim, int, error) {
	bad := fmt.Errorf("unexpected script reply %v", res)
	if len(res) != 7 {
		return Claim{}, 0, bad
	}
	epoch, ok1 := res[1].(int64)
	blobs, ok2 := res[2].([]any)
	committed, err := strconv.ParseInt(fmt.Sprint(res[3]), 10, 64)
	prev, ok3 := res[4].(string)
	discarded, ok4 := res[5].(string)
	floors, ok5 := res[6].([]any)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || err != nil || len(floors)%3 != 0 {
		return Claim{}, 0, bad
	}
	c := Claim{Epoch: epoch, Acked: new(offsets.Set), Committed: committed, PrevOwner: prev, DiscardedTopicID: discarded,
		Floors: []Floor{}}
	for _, b := range blobs {
		str, ok := b.(string)
		if !ok {
			return Claim{}, 0, bad
		}
		var set offsets.Set
		if err := set.UnmarshalBinary([]byte(str)); err != nil {
			return Claim{}, 0, fmt.Errorf("stored acked offsets: %w", err)
		}
		c.Acked.Union(&set)
	}
	for i := 0; i < len(floors); i += 3 {
		lo, ok1 := floors[i].(int64)
		hi, ok2 := floors[i+1].(int64)
		wm, ok3 := floors[i+2].(int64)
		if !ok1 || !ok2 || !ok3 {
			return Claim{}, 0, bad
		}
		// Neighbours cut from different claims may know the same.
		if n := len(c.Floors); n > 0 && c.Floors[n-1].Range.Hi == uint32(lo) && c.Floors[n-1].Watermark == wm {
			c.Floors[n-1].Range.Hi = uint32(hi)
			continue
		}
		c.Floors = append(c.Floors, Floor{Range: keyrange.Range{Lo: uint32(lo), Hi: uint32(hi)}, Watermark: wm})
	}
	return c, len(blobs), nil
}

// Flush is the owner's in-memory state of one claim, written to Redis by
// Store.FlushRanges.
type Flush struct {
	// Epoch is the one ClaimRanges returned.
	Epoch int64
	// Ranges are the hash ranges the claim holds now: those it claimed
	// less those it released. Nil or empty means the whole space.
	Ranges keyrange.Set
	// Acked holds the acked offsets at or above Watermark, true acks only
	// (records delivered or dead-lettered, gaps, markers; never records
	// skipped for being of other ranges). Trim it (offsets.Set.TrimBelow)
	// before flushing: offsets below the watermark only cost space. Nil
	// means none.
	Acked *offsets.Set
	// Watermark is the lowest offset, at or above the claim's floors,
	// whose record is in Ranges and not acked (or the fetch position).
	Watermark int64
	// Fetched is the next offset to fetch.
	Fetched int64
	// Committed mirrors the last Kafka commit, -1 if none.
	Committed int64
	// Pending counts fetched offsets at or above the watermark not acked.
	Pending int64
	// InFlight counts records dispatched to the endpoint right now.
	InFlight int64
	// Keys counts the keys with a record in flight or queued (busy lanes).
	Keys int64
	// Oldest is when the oldest pending record was dispatched; zero if
	// none is pending.
	Oldest time.Time
	// Holding is the record the watermark waits for, nil when none
	// (nothing pending).
	Holding *Holding
	// Stalled, when not nil, replaces the claim's stored keys not
	// flowing; nil leaves them as they are.
	Stalled *StalledKeys
}

// StalledKeys is what a claim stores of its keys whose records do not
// flow: the first of them by offset, and how many there are.
type StalledKeys struct {
	Keys  []StalledKey `json:"keys"`
	Total int          `json:"total"`
}

// StalledKey is one key whose records do not flow; the fields are those
// of subscription.StalledKey that the owner knows. Times are the owner's
// clock.
type StalledKey struct {
	Key          string    `json:"key,omitempty"`
	KeyBase64    string    `json:"key_base64,omitempty"`
	KeyTruncated bool      `json:"key_truncated,omitempty"`
	Offset       int64     `json:"offset"`
	State        string    `json:"state"`
	Since        time.Time `json:"since"`
	Dispatched   time.Time `json:"dispatched,omitzero"`
	Attempts     int       `json:"attempts,omitempty"`
	LastStatus   int       `json:"last_status,omitempty"`
	LastError    string    `json:"last_error,omitempty"`
	NextAttempt  time.Time `json:"next_attempt,omitzero"`
	Behind       int64     `json:"behind"`
	Parked       int64     `json:"parked,omitempty"`
}

// Holding is the record a claim's watermark waits for: the answer to
// "why does my commit not move". Times are the owner's clock.
type Holding struct {
	Offset int64 `json:"offset"`
	// Key is the record key as text, cut to 128 bytes; empty for none.
	Key string `json:"key,omitempty"`
	// Since is when the record was read from Kafka.
	Since time.Time `json:"since"`
	// Dispatched is when its current attempt began; zero while it waits
	// (for its key's earlier record, a delivery slot, or its retry).
	Dispatched time.Time `json:"dispatched,omitzero"`
	// Attempts counts its attempts so far in this delivery.
	Attempts int `json:"attempts"`
	// LastStatus and LastError are its last attempt's answer.
	LastStatus int    `json:"last_status,omitempty"`
	LastError  string `json:"last_error,omitempty"`
	// NextAttempt is when it is tried again; zero when not waiting.
	NextAttempt time.Time `json:"next_attempt,omitzero"`
	// Behind counts the records pending behind it in the claim's ranges.
	Behind int64 `json:"behind"`
	// Parked counts the pending records of the claim whose values were
	// dropped until their key has room (read again from Kafka then), and
	// OldestParked is when the oldest of them was read.
	Parked       int64     `json:"parked,omitempty"`
	OldestParked time.Time `json:"oldest_parked,omitzero"`
}

// PartitionFlush is one partition's state for FlushRanges.
type PartitionFlush struct {
	Key   PartitionKey
	Flush Flush
}

// FlushResult is the outcome of one write of FlushRanges.
type FlushResult struct {
	// Err is nil when the write was made.
	Err error
	// Watermark is the partition's merged watermark after the write: the
	// least of every piece's (owned, released or never claimed), so every
	// record below it was delivered, whatever its hash; -1 while any
	// piece's is unknown.
	Watermark int64
	// Committed is the stored commit mirror after the write; it only
	// grows (the highest commit any sharer reported).
	Committed int64
}

// FlushRanges writes every state of fs, each iff its Epoch's claim still
// holds exactly its Ranges, all in one pipelined round trip under ctx's
// one deadline: a node writes all its partitions per tick at the cost of
// one. Each write stands alone: a partition not written answers ErrFenced
// (a newer claim took some of its ranges) or ErrStateLost (its key is
// gone), and does not stop the others. It answers one FlushResult per
// element of fs, in its order, with the partition's merged state after
// its write: the watermark every sharer's acks add up to, which a commit
// must not pass, and the commit mirror.
//
// On a single server (a *redis.Client, Sentinel's included) the whole
// round is one script call, up to maxRound partitions per call; on Redis
// Cluster, one call per hash slot, pipelined. Each partition still
// answers on its own.
func (s *Store) FlushRanges(ctx context.Context, fs []PartitionFlush) []FlushResult {
	out := make([]FlushResult, len(fs))
	var keys []string
	var args [][]any
	var idx []int
	for i, pf := range fs {
		out[i] = FlushResult{Watermark: -1, Committed: -1}
		if err := pf.Key.validate(); err != nil {
			out[i].Err = fmt.Errorf("tracking: flush: %w", err)
			continue
		}
		f := pf.Flush
		rs, err := claimedRanges(f.Ranges)
		if err != nil {
			out[i].Err = fmt.Errorf("tracking: flush %s: %w", pf.Key, err)
			continue
		}
		var acked []byte
		if f.Acked != nil {
			acked = f.Acked.AppendBinary(nil)
		} else {
			acked = (&offsets.Set{}).AppendBinary(nil)
		}
		var oldest int64
		if !f.Oldest.IsZero() {
			oldest = f.Oldest.UnixMilli()
		}
		var holding []byte
		if f.Holding != nil {
			holding, _ = json.Marshal(f.Holding) // plain fields: cannot fail
		}
		var stalled []byte
		if f.Stalled != nil {
			stalled, _ = json.Marshal(f.Stalled) // plain fields: cannot fail
		}
		keys = append(keys, s.key(pf.Key))
		args = append(args, []any{
			f.Epoch, rs.String(), acked, f.Watermark, f.Fetched, f.Committed, f.Pending, f.InFlight, oldest, f.Keys, holding, stalled})
		idx = append(idx, i)
	}
	groups := flushGroups(s.rdb, keys)
	calls := make([]scriptCall, len(groups))
	for g, members := range groups {
		if len(members) == 1 {
			j := members[0]
			calls[g] = scriptCall{script: flushCmd, keys: []string{keys[j]}, args: args[j]}
			continue
		}
		c := scriptCall{script: flushRoundCmd, keys: make([]string, 0, len(members)), args: make([]any, 0, len(members)*flushArgs)}
		for _, j := range members {
			c.keys = append(c.keys, keys[j])
			c.args = append(c.args, args[j]...)
		}
		calls[g] = c
	}
	for g, res := range s.runMany(ctx, calls) {
		members := groups[g]
		if len(members) == 1 {
			i := idx[members[0]]
			out[i] = flushResult(fs[i], res)
			continue
		}
		for k, j := range members {
			i := idx[j]
			r := scriptResult{err: res.err}
			if res.err == nil {
				if reply, ok := at(res.reply, k).([]any); ok {
					r.reply = reply
				} else {
					r.err = fmt.Errorf("unexpected reply %v of a round of %d", at(res.reply, k), len(members))
				}
			}
			out[i] = flushResult(fs[i], r)
		}
	}
	return out
}

// flushResult reads one partition's reply of flushCmd.
func flushResult(pf PartitionFlush, res scriptResult) FlushResult {
	out := FlushResult{Watermark: -1, Committed: -1}
	pk, epoch := pf.Key, pf.Flush.Epoch
	if res.err != nil {
		out.Err = fmt.Errorf("tracking: flush %s: %w", pk, res.err)
		return out
	}
	if status(res.reply) == "error" {
		out.Err = fmt.Errorf("tracking: flush %s: %v", pk, at(res.reply, 1))
		return out
	}
	if out.Err = fencedReply("flush", pk, epoch, res.reply); out.Err != nil {
		return out
	}
	wm, ok1 := at(res.reply, 1).(int64)
	committed, ok2 := at(res.reply, 2).(int64)
	if !ok1 || !ok2 {
		out.Err = fmt.Errorf("tracking: flush %s: unexpected script reply %v", pk, res.reply)
		return out
	}
	out.Watermark, out.Committed = wm, committed
	return out
}

// maxRound bounds the partitions of one flushRoundCmd call, and so the
// time Redis spends in one script, during which it serves no one else.
const maxRound = 256

// flushGroups cuts a round's keys into the groups one script call may
// write, as indexes into keys, in order. A single server takes any keys
// together; Redis Cluster only keys of one slot (a script's keys must
// share one), so the groups there are the slots; any other client (a
// Ring shards by key) gets one call per key. No group exceeds maxRound.
func flushGroups(rdb redis.UniversalClient, keys []string) [][]int {
	var groups [][]int
	switch rdb.(type) {
	case *redis.Client:
		for lo := 0; lo < len(keys); lo += maxRound {
			g := make([]int, 0, min(maxRound, len(keys)-lo))
			for j := lo; j < min(lo+maxRound, len(keys)); j++ {
				g = append(g, j)
			}
			groups = append(groups, g)
		}
	case *redis.ClusterClient:
		// open is the group of a slot still taking keys.
		open := make(map[int]int)
		for j, k := range keys {
			slot := keyspace.Slot(k)
			g, ok := open[slot]
			if !ok || len(groups[g]) == maxRound {
				g = len(groups)
				groups = append(groups, nil)
				open[slot] = g
			}
			groups[g] = append(groups[g], j)
		}
	default:
		for j := range keys {
			groups = append(groups, []int{j})
		}
	}
	return groups
}

// ReleaseRanges gives up part of pk's claim of epoch after its owner
// drained those ranges (answered what was in flight, flushed its acks):
// they keep their watermarks and the claim's acked offsets for the next
// owner, and the claim's ranges shrink, so its later flushes declare the
// smaller set. Empty ranges release nothing. It returns ErrFenced when
// the claim does not hold them all now, ErrStateLost when the key is
// gone; nothing is written then.
func (s *Store) ReleaseRanges(ctx context.Context, pk PartitionKey, epoch int64, ranges keyrange.Set) error {
	if err := pk.validate(); err != nil {
		return fmt.Errorf("tracking: release: %w", err)
	}
	rs, err := keyrange.NewSet(ranges...)
	if err != nil {
		return fmt.Errorf("tracking: release %s: %w", pk, err)
	}
	res := s.runMany(ctx, []scriptCall{{script: releaseCmd, keys: []string{s.key(pk)}, args: []any{epoch, rs.String()}}})[0]
	if res.err != nil {
		return fmt.Errorf("tracking: release %s: %w", pk, res.err)
	}
	return fencedReply("release", pk, epoch, res.reply)
}

// PartitionRelease is one partition's claim for ReleaseMany.
type PartitionRelease struct {
	Key   PartitionKey
	Epoch int64
}

// ReleaseMany releases every claim of rs as Release does, all in one
// pipelined round trip, so a node hands over all its partitions at the
// cost of one. It returns one error per element of rs, in its order.
func (s *Store) ReleaseMany(ctx context.Context, rs []PartitionRelease) []error {
	errs := make([]error, len(rs))
	var calls []scriptCall
	var idx []int
	for i, r := range rs {
		if err := r.Key.validate(); err != nil {
			errs[i] = fmt.Errorf("tracking: release: %w", err)
			continue
		}
		calls = append(calls, scriptCall{script: releaseCmd, keys: []string{s.key(r.Key)}, args: []any{r.Epoch, releaseAll}})
		idx = append(idx, i)
	}
	for j, res := range s.runMany(ctx, calls) {
		i := idx[j]
		if res.err != nil {
			errs[i] = fmt.Errorf("tracking: release %s: %w", rs[i].Key, res.err)
			continue
		}
		errs[i] = fencedReply("release", rs[i].Key, rs[i].Epoch, res.reply)
	}
	return errs
}

// releaseAll asks releaseCmd for every range the claim holds.
const releaseAll = "*"

// scriptCall is one run of a script in a pipeline.
type scriptCall struct {
	script *redis.Script
	keys   []string
	args   []any
}

// scriptResult is a scriptCall's reply or error.
type scriptResult struct {
	reply []any
	err   error
}

// runMany runs every call, pipelined by EVALSHA. Each script is loaded
// before the first pipeline; a server that forgot it since (a restart,
// SCRIPT FLUSH, a failover) answers NOSCRIPT, and those calls run again,
// pipelined, once their scripts are loaded anew. On a cluster the
// pipeline splits by node, one round trip each, in parallel.
func (s *Store) runMany(ctx context.Context, calls []scriptCall) []scriptResult {
	out := make([]scriptResult, len(calls))
	if len(calls) == 0 {
		return out
	}
	todo := make([]int, len(calls))
	for i := range todo {
		todo[i] = i
	}
	if todo = s.loadFor(ctx, calls, todo, out, false); len(todo) == 0 {
		return out
	}
	for attempt := 0; ; attempt++ {
		cmds := make([]*redis.Cmd, len(todo))
		// The pipeline's own error is the first command's; each command
		// carries its own.
		_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for j, i := range todo {
				cmds[j] = calls[i].script.EvalSha(ctx, p, calls[i].keys, calls[i].args...)
			}
			return nil
		})
		var again []int
		for j, i := range todo {
			reply, err := cmds[j].Slice()
			if redis.HasErrorPrefix(err, "NOSCRIPT") && attempt == 0 {
				again = append(again, i)
				continue
			}
			out[i] = scriptResult{reply: reply, err: err}
		}
		if len(again) == 0 {
			return out
		}
		todo = s.loadFor(ctx, calls, again, out, true)
		if len(todo) == 0 {
			return out
		}
	}
}

// loadFor loads the scripts of the calls todo, each once: those this
// Store has not loaded yet, or every one when reload (a server answered
// NOSCRIPT). It returns the calls whose script is loaded; the others
// answer the load's error in out.
func (s *Store) loadFor(ctx context.Context, calls []scriptCall, todo []int, out []scriptResult, reload bool) []int {
	errs := make(map[*redis.Script]error)
	ready := make([]int, 0, len(todo))
	for _, i := range todo {
		script := calls[i].script
		err, tried := errs[script]
		if !tried {
			if reload || !s.loaded(script) {
				err = s.load(ctx, script)
			}
			errs[script] = err
		}
		if err != nil {
			out[i].err = err
			continue
		}
		ready = append(ready, i)
	}
	return ready
}

// loaded reports whether script was loaded by this Store.
func (s *Store) loaded(script *redis.Script) bool {
	s.scriptsMu.Lock()
	defer s.scriptsMu.Unlock()
	return s.scripts[script.Hash()]
}

// load loads script into the server (every master of a cluster).
func (s *Store) load(ctx context.Context, script *redis.Script) error {
	if err := script.Load(ctx, s.rdb).Err(); err != nil {
		return fmt.Errorf("load script: %w", err)
	}
	s.scriptsMu.Lock()
	s.scripts[script.Hash()] = true
	s.scriptsMu.Unlock()
	return nil
}

// fencedReply turns the reply of an epoch-checked script into an error.
func fencedReply(op string, pk PartitionKey, epoch int64, res []any) error {
	switch status(res) {
	case "ok":
		return nil
	case "fenced":
		return fmt.Errorf("tracking: %s %s with epoch %d: %w (current epoch %v)", op, pk, epoch, ErrFenced, at(res, 1))
	case "lost":
		return fmt.Errorf("tracking: %s %s: %w", op, pk, ErrStateLost)
	default:
		return fmt.Errorf("tracking: %s %s: unexpected script reply %v", op, pk, res)
	}
}

func status(res []any) string {
	if len(res) == 0 {
		return ""
	}
	s, _ := res[0].(string)
	return s
}

func at(res []any, i int) any {
	if i < len(res) {
		return res[i]
	}
	return nil
}

// DeleteSubscription removes every tracking key of a subscription. It
// scans the keyspace (every master of a Redis Cluster), which is fine for
// an operation as rare as deleting a subscription. Call it once the
// subscription's consumers have stopped: an owner still flushing gets
// ErrStateLost and could claim its partition again.
func (s *Store) DeleteSubscription(ctx context.Context, subscriptionID string) error {
	if err := validSubscription(subscriptionID); err != nil {
		return fmt.Errorf("tracking: delete subscription: %w", err)
	}
	pattern := s.keys.PartitionPattern(subscriptionID)
	var err error
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return s.deleteMatching(ctx, c, pattern, subscriptionID)
		})
	} else {
		err = s.deleteMatching(ctx, s.rdb, pattern, subscriptionID)
	}
	if err != nil {
		return fmt.Errorf("tracking: delete subscription %q: %w", subscriptionID, err)
	}
	return nil
}

// DeletePartitions forgets the tracking state of the given partitions
// only: a seek of some partitions must not make the others deliver again
// what they acked above their commit. The keys live in different slots
// on a cluster, so each is unlinked by its own command, pipelined.
func (s *Store) DeletePartitions(ctx context.Context, pks []PartitionKey) error {
	for _, pk := range pks {
		if err := pk.validate(); err != nil {
			return fmt.Errorf("tracking: delete partitions: %w", err)
		}
	}
	if len(pks) == 0 {
		return nil
	}
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, pk := range pks {
			p.Unlink(ctx, s.key(pk))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("tracking: delete partitions: %w", err)
	}
	return nil
}

// scanBatch is the COUNT hint of each SCAN step.
const scanBatch = 512

// deleteMatching unlinks, on one server, the keys matching pattern that
// belong to subscription exactly. Keys are unlinked one per command: on a
// cluster they live in different slots.
func (s *Store) deleteMatching(ctx context.Context, c redis.Cmdable, pattern, subscription string) error {
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, pattern, scanBatch).Result()
		if err != nil {
			return fmt.Errorf("scan: %w", err)
		}
		var mine []string
		for _, k := range keys {
			// The pattern also matches ids that extend this one across a
			// colon ("a" matches "a:b"); keep only exact owners.
			if pk, ok := s.parseKey(k); ok && pk.Subscription == subscription {
				mine = append(mine, k)
			}
		}
		if len(mine) > 0 {
			_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, k := range mine {
					p.Unlink(ctx, k)
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("unlink: %w", err)
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}
