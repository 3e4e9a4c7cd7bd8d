package nodes

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/keyhook/keyhook/internal/keyspace"
	"github.com/redis/go-redis/v9"
)

// Defaults of Config, applied to fields left at zero.
const (
	DefaultPrefix     = keyspace.DefaultPrefix
	DefaultInterval   = 2 * time.Second
	DefaultLiveFor    = 10 * time.Second
	DefaultPruneAfter = time.Hour
)

// removeTimeout bounds the removal of a node's entry when Run stops: the
// run's context is over by then, and a stop must not hang on Redis.
const removeTimeout = 2 * time.Second

// Ownership names a partition that a node owns for a subscription.
type Ownership struct {
	Subscription string `json:"subscription"`
	Topic        string `json:"topic"`
	Partition    int32  `json:"partition"`
	// Claimed is false while the partition is assigned to the node but its
	// claim in the tracking state is refused or failing.
	Claimed bool `json:"claimed"`
	// Ranges are the key hashes of a shared partition the node delivers
	// ("lo-hi,…", hi exclusive, of 0–65536); "" for the whole partition.
	Ranges string `json:"ranges,omitempty"`
	// Reader is the consumer group of the shared read the partition is
	// read with (--shared-read), "" when the subscription reads with a
	// group of its own.
	Reader string `json:"reader,omitempty"`
	// CatchingUp is set while the subscription's cursor reads the
	// partition on its own to catch up with the shared read.
	CatchingUp bool `json:"catching_up,omitempty"`
}

// Info is what a node says of itself.
type Info struct {
	ID          string    `json:"id"`
	Version     string    `json:"version"`
	StartedAt   time.Time `json:"started_at"`
	HeartbeatAt time.Time `json:"heartbeat_at"`
	// Roles are the roles the node runs: "api", "dispatcher".
	Roles []string `json:"roles"`
	// Owned lists the partitions the node owned at its last heartbeat.
	Owned []Ownership `json:"owned"`
	// Breakers lists the node's circuit breakers that were open or
	// half-open at its last heartbeat, by origin.
	Breakers []Breaker `json:"breakers,omitempty"`
}

// Breaker is a node's circuit breaker of one endpoint origin that is not
// closed (breaker.Status).
type Breaker struct {
	// Origin is the endpoint origin, scheme://host:port.
	Origin string `json:"origin"`
	// State is "open" (no requests) or "half-open" (one probe at a time).
	State string `json:"state"`
	// Since is when it last opened.
	Since time.Time `json:"since"`
	// Waiting counts the deliveries it holds back on the node.
	Waiting int `json:"waiting"`
}

// Config tunes a Registry. The zero value is ready to use.
type Config struct {
	// Prefix starts the registry's key, "<prefix>:nodes" (its layout is
	// internal/keyspace's). It must not contain '{' or '}'. Default
	// "keyhook".
	Prefix string
	// Interval is the time between heartbeats. Default 2s.
	Interval time.Duration
	// LiveFor is how long after its last heartbeat a node still counts
	// as live. It should be several Intervals, so that one slow write
	// does not make a node vanish. Default 10s.
	LiveFor time.Duration
	// PruneAfter is how long after its last heartbeat a node's entry is
	// deleted by the other nodes' Run (give or take the tenth of it, at
	// most a minute, between two prunes). Default 1h.
	PruneAfter time.Duration
	// Logger receives heartbeat failures (one line when heartbeats start
	// failing, one when they recover). Default slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Registry reads and writes the node registry. It is safe for concurrent
// use.
type Registry struct {
	rdb redis.UniversalClient
	cfg Config
	key string
}

// Validate reports the first invalid field of c. Zero fields are valid:
// they mean the default; the relations between the durations hold for
// the values in effect.
func (c Config) Validate() error {
	if err := (keyspace.Keyspace{Prefix: c.Prefix}).Validate(); err != nil {
		return fmt.Errorf("nodes: config: Prefix: %w", err)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Interval", c.Interval}, {"LiveFor", c.LiveFor}, {"PruneAfter", c.PruneAfter}} {
		if d.v < 0 {
			return fmt.Errorf("nodes: config: %s is %v, must not be negative", d.name, d.v)
		}
	}
	c = c.withDefaults()
	if c.LiveFor <= c.Interval {
		return fmt.Errorf("nodes: config: LiveFor (%v) must exceed Interval (%v)", c.LiveFor, c.Interval)
	}
	if c.PruneAfter < c.LiveFor {
		return fmt.Errorf("nodes: config: PruneAfter (%v) must be at least LiveFor (%v)", c.PruneAfter, c.LiveFor)
	}
	return nil
}

func (c Config) withDefaults() Config {
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&c.Interval, DefaultInterval}, {&c.LiveFor, DefaultLiveFor}, {&c.PruneAfter, DefaultPruneAfter}} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// New returns a Registry over rdb, which the caller keeps ownership of.
// It returns an error naming the bad field when cfg is invalid.
func New(rdb redis.UniversalClient, cfg Config) (*Registry, error) {
	if rdb == nil {
		return nil, errors.New("nodes: new: nil redis client")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Registry{rdb: rdb, cfg: cfg, key: keyspace.Keyspace{Prefix: cfg.Prefix}.Nodes()}, nil
}

// pruneScript deletes a node's entry if it is still exactly the one read:
// a node that heartbeat in the meantime keeps its entry.
//
// KEYS[1]: the nodes hash (keyspace.Nodes).
// ARGV[1]: the node id.
// ARGV[2]: the entry as read.
// Result: 1 if deleted, 0 if the entry changed or is gone.
var pruneScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  return redis.call('HDEL', KEYS[1], ARGV[1])
end
return 0
`)

// Run heartbeats self into the registry every Interval until ctx ends,
// with Owned set from owned (nil means none) and HeartbeatAt from the
// clock, then removes self's entry and returns nil. The first heartbeat
// is immediate. Redis failures are logged and retried at the next
// heartbeat: a registry outage must not stop a node. The first heartbeat,
// and one every tenth of PruneAfter (at most a minute apart), also
// deletes the entries of nodes silent for PruneAfter. The ownership is
// encoded again only when it changed.
func (r *Registry) Run(ctx context.Context, self Info, owned func() []Ownership) error {
	return r.RunReporting(ctx, self, func(i *Info) {
		if owned != nil {
			i.Owned = owned()
		}
	})
}

// RunReporting is Run with what changes between heartbeats filled in by
// report (Owned, Breakers), called before each heartbeat.
func (r *Registry) RunReporting(ctx context.Context, self Info, report func(*Info)) error {
	if self.ID == "" {
		return errors.New("nodes: run: self.ID is empty")
	}
	if self.StartedAt.IsZero() {
		self.StartedAt = r.cfg.Now().UTC()
	}
	if self.Roles == nil {
		self.Roles = []string{}
	}
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	failing := false
	var owned ownedCache
	var nextPrune time.Time
	for {
		err := r.heartbeat(ctx, self, report, &owned)
		if now := r.cfg.Now(); err == nil && !now.Before(nextPrune) {
			err = r.prune(ctx)
			nextPrune = now.Add(r.cfg.pruneEvery())
		}
		switch {
		case ctx.Err() != nil:
		case err != nil && !failing:
			failing = true
			r.cfg.Logger.Warn("nodes: heartbeat failed; retrying every interval", "node", self.ID, "error", err)
		case err == nil && failing:
			failing = false
			r.cfg.Logger.Info("nodes: heartbeat recovered", "node", self.ID)
		}
		select {
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
			defer cancel()
			if err := r.rdb.HDel(rctx, r.key, self.ID).Err(); err != nil {
				r.cfg.Logger.Warn("nodes: could not remove this node from the registry; it ages out", "node", self.ID, "error", err)
			}
			return nil
		case <-t.C:
		}
	}
}

// pruneEvery is how often a node prunes: entries are pruned PruneAfter
// (an hour by default) after their last heartbeat, so reading every
// node's entry each Interval would buy nothing; a tenth of PruneAfter, at
// most a minute and at least an Interval, is soon enough.
func (c Config) pruneEvery() time.Duration {
	return max(c.Interval, min(c.PruneAfter/10, time.Minute))
}

// ownedCache is the JSON of the ownership last reported: a node owning
// thousands of partitions encodes them again only when they changed.
// Only Run's goroutine uses it.
type ownedCache struct {
	owned []Ownership
	data  json.RawMessage
}

// encode returns owned's JSON, the cached one when owned did not change.
func (c *ownedCache) encode(owned []Ownership) (json.RawMessage, error) {
	if c.data != nil && slices.Equal(owned, c.owned) {
		return c.data, nil
	}
	data, err := json.Marshal(owned)
	if err != nil {
		return nil, err
	}
	c.owned, c.data = owned, data
	return data, nil
}

// wireHead is Info as stored, less its ownership, which encode appends:
// encoding/json compacts a RawMessage again on every Marshal, which for a
// node owning thousands of partitions was most of an idle heartbeat.
type wireHead struct {
	Info
	// Owned hides Info.Owned; nil, it is left out.
	Owned *struct{} `json:"owned,omitempty"`
}

// encodeInfo is self as stored: its fields, then "owned" with the
// ownership's JSON as it is.
func encodeInfo(self Info, owned json.RawMessage) ([]byte, error) {
	head, err := json.Marshal(wireHead{Info: self})
	if err != nil {
		return nil, err
	}
	// head is a JSON object with at least "id": drop its closing brace.
	out := make([]byte, 0, len(head)+len(`,"owned":`)+len(owned))
	out = append(out, head[:len(head)-1]...)
	out = append(out, `,"owned":`...)
	out = append(out, owned...)
	return append(out, '}'), nil
}

func (r *Registry) heartbeat(ctx context.Context, self Info, report func(*Info), cache *ownedCache) error {
	self.HeartbeatAt = r.cfg.Now().UTC()
	if report != nil {
		report(&self)
	}
	if self.Owned == nil {
		self.Owned = []Ownership{}
	}
	owned, err := cache.encode(self.Owned)
	if err != nil {
		return fmt.Errorf("nodes: heartbeat: encode: %w", err)
	}
	data, err := encodeInfo(self, owned)
	if err != nil {
		return fmt.Errorf("nodes: heartbeat: encode: %w", err)
	}
	if err := r.rdb.HSet(ctx, r.key, self.ID, data).Err(); err != nil {
		return fmt.Errorf("nodes: heartbeat: %w", err)
	}
	return nil
}

// prune deletes entries silent for PruneAfter. It reads of each entry
// only its heartbeat time, not the ownership that follows it.
func (r *Registry) prune(ctx context.Context) error {
	all, err := r.rdb.HGetAll(ctx, r.key).Result()
	if err != nil {
		return fmt.Errorf("nodes: prune: %w", err)
	}
	cutoff := r.cfg.Now().Add(-r.cfg.PruneAfter)
	for id, data := range all {
		// An entry that does not decode is as dead as a silent one.
		if at, ok := heartbeatAt([]byte(data)); ok && !at.Before(cutoff) {
			continue
		}
		if err := pruneScript.Run(ctx, r.rdb, []string{r.key}, id, data).Err(); err != nil {
			return fmt.Errorf("nodes: prune %q: %w", id, err)
		}
	}
	return nil
}

// heartbeatAt reads an entry's heartbeat_at, reading no further than it
// (a heartbeat writes it before the ownership); false if the entry is not
// a JSON object with one.
func heartbeatAt(data []byte) (time.Time, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return time.Time{}, false
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return time.Time{}, false
		}
		if tok == "heartbeat_at" {
			var at time.Time
			if err := dec.Decode(&at); err != nil {
				return time.Time{}, false
			}
			return at, true
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return time.Time{}, false
		}
	}
	return time.Time{}, false
}

// List returns the live nodes, sorted by id: those whose last heartbeat
// is at most LiveFor old. Entries that do not decode are skipped.
func (r *Registry) List(ctx context.Context) ([]Info, error) {
	all, err := r.rdb.HGetAll(ctx, r.key).Result()
	if err != nil {
		return nil, fmt.Errorf("nodes: list: %w", err)
	}
	cutoff := r.cfg.Now().Add(-r.cfg.LiveFor)
	out := make([]Info, 0, len(all))
	for _, data := range all {
		var info Info
		if err := json.Unmarshal([]byte(data), &info); err != nil {
			continue
		}
		if info.HeartbeatAt.Before(cutoff) {
			continue
		}
		if info.Roles == nil {
			info.Roles = []string{}
		}
		if info.Owned == nil {
			info.Owned = []Ownership{}
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b Info) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}
