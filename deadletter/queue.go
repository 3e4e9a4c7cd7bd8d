package deadletter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/internal/keyspace"
)

// Redrive is one dead letter queued for delivery again: the source record
// as the endpoint saw it, and the delivery id it had.
type Redrive struct {
	// ID names this queueing; a dead letter redriven twice is queued
	// twice under two ids.
	ID           string `json:"id"`
	Subscription string `json:"subscription"`
	DeliveryID   string `json:"delivery_id"`
	// Topic, Partition and Offset are the source record's.
	Topic     string          `json:"topic"`
	Partition int32           `json:"partition"`
	Offset    int64           `json:"offset"`
	Key       []byte          `json:"key"`
	Value     []byte          `json:"value"`
	Headers   []RedriveHeader `json:"headers,omitempty"`
	Timestamp time.Time       `json:"timestamp"`

	// raw is the entry as queued, which Done removes.
	raw string
}

// RedriveHeader is one of the source record's own headers.
type RedriveHeader struct {
	Key   string `json:"k"`
	Value []byte `json:"v"`
}

// Record is the source record to deliver again.
func (r *Redrive) Record() *kgo.Record {
	rec := &kgo.Record{Key: r.Key, Value: r.Value, Timestamp: r.Timestamp, Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
	for _, h := range r.Headers {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	return rec
}

// QueueConfig tunes a Queue; zero values mean the defaults.
type QueueConfig struct {
	// Prefix starts every key; default keyspace.DefaultPrefix.
	Prefix string
}

// Queue holds redriven dead letters in Redis, one list per source
// partition, until the partition's owner has sent them (see the
// dispatcher): a redrive then goes through the key's lane, after the
// key's records in flight and before its next ones. An entry leaves the
// queue only once it was tried; a node that dies mid-redrive leaves it
// for the partition's next owner (a duplicate, under the same delivery
// id). The dead letter itself stays in its dead-letter topic throughout.
type Queue struct {
	rdb  redis.UniversalClient
	keys keyspace.Keyspace
}

// NewQueue returns a Queue over rdb.
func NewQueue(rdb redis.UniversalClient, cfg QueueConfig) (*Queue, error) {
	if rdb == nil {
		return nil, fmt.Errorf("deadletter: NewQueue: a Redis client is required")
	}
	ks := keyspace.Keyspace{Prefix: cfg.Prefix}
	if err := ks.Validate(); err != nil {
		return nil, fmt.Errorf("deadletter: QueueConfig.Prefix: %w", err)
	}
	return &Queue{rdb: rdb, keys: ks}, nil
}

// Push queues rs, each at the end of its source partition's list, in the
// order given, and the lists in the subscription's index, in one
// transaction: all are queued or none.
func (q *Queue) Push(ctx context.Context, subscription string, rs []Redrive) error {
	if len(rs) == 0 {
		return nil
	}
	_, err := q.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i := range rs {
			r := &rs[i]
			r.Subscription = subscription
			if r.ID == "" {
				r.ID = newID()
			}
			b, err := json.Marshal(r)
			if err != nil {
				return err
			}
			p.RPush(ctx, q.keys.RedriveQueue(subscription, r.Topic, r.Partition), b)
			p.SAdd(ctx, q.keys.RedriveIndex(subscription), indexMember(r.Topic, r.Partition))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("deadletter: queue redrives: %w", err)
	}
	// Then the count of pushes moves, which tells every node's poll to
	// list the queues again (QueuedVersion). It is a key of its own, in
	// no subscription's slot, so it cannot be in the transaction; should
	// it fail, the redrives are queued all the same and the pollers' next
	// full listing finds them.
	_ = q.rdb.Incr(ctx, q.keys.RedrivesQueued()).Err()
	return nil
}

// QueuedVersion returns the count of pushes, on any subscription, that
// Push moves after queueing: a poller lists the queues again only when it
// moved (and now and then whatever it says). "" when nothing was ever
// pushed.
func (q *Queue) QueuedVersion(ctx context.Context) (string, error) {
	v, err := q.rdb.Get(ctx, q.keys.RedrivesQueued()).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("deadletter: read the redrive count: %w", err)
	}
	return v, nil
}

// Source names a source partition.
type Source struct {
	Topic     string
	Partition int32
}

// indexMember names a source partition in the RedriveIndex. Topic names
// have no colon.
func indexMember(topic string, partition int32) string {
	return topic + ":" + strconv.FormatInt(int64(partition), 10)
}

// Queued lists the source partitions of the subscription that have
// redrives queued: one read, so that owners look at their partitions'
// queues only when there is something in them.
func (q *Queue) Queued(ctx context.Context, subscription string) ([]Source, error) {
	ms, err := q.rdb.SMembers(ctx, q.keys.RedriveIndex(subscription)).Result()
	if err != nil {
		return nil, fmt.Errorf("deadletter: list redrive queues: %w", err)
	}
	return parseSources(ms), nil
}

// QueuedMany is Queued for many subscriptions in one round trip (a
// pipeline; on a cluster, one per node holding some): the dispatcher
// polls once for every subscription a node runs. Subscriptions with
// nothing queued are absent.
func (q *Queue) QueuedMany(ctx context.Context, subscriptions []string) (map[string][]Source, error) {
	cmds := make([]*redis.StringSliceCmd, len(subscriptions))
	_, err := q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, s := range subscriptions {
			cmds[i] = p.SMembers(ctx, q.keys.RedriveIndex(s))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("deadletter: list redrive queues: %w", err)
	}
	out := make(map[string][]Source)
	for i, s := range subscriptions {
		if src := parseSources(cmds[i].Val()); len(src) > 0 {
			out[s] = src
		}
	}
	return out, nil
}

// parseSources reads RedriveIndex members; a malformed one is skipped.
func parseSources(ms []string) []Source {
	out := make([]Source, 0, len(ms))
	for _, m := range ms {
		i := strings.LastIndexByte(m, ':')
		p, err := strconv.ParseInt(m[i+1:], 10, 32)
		if i <= 0 || err != nil {
			continue
		}
		out = append(out, Source{Topic: m[:i], Partition: int32(p)})
	}
	return out
}

// Next returns up to n redrives queued for one source partition, oldest
// first, leaving them queued. An entry that does not decode is dropped.
func (q *Queue) Next(ctx context.Context, subscription, topic string, partition int32, n int) ([]Redrive, error) {
	key := q.keys.RedriveQueue(subscription, topic, partition)
	raws, err := q.rdb.LRange(ctx, key, 0, int64(n)-1).Result()
	if err != nil {
		return nil, fmt.Errorf("deadletter: read redrives: %w", err)
	}
	out := make([]Redrive, 0, len(raws))
	for _, raw := range raws {
		var r Redrive
		if json.Unmarshal([]byte(raw), &r) != nil || r.Subscription != subscription {
			keys := []string{key, q.keys.RedriveIndex(subscription)}
			doneCmd.Run(ctx, q.rdb, keys, raw, indexMember(topic, partition))
			continue
		}
		r.raw = raw
		out = append(out, r)
	}
	return out, nil
}

// doneCmd takes one entry out of a redrive queue, and the queue out of
// the subscription's index once it is empty, atomically: a Push between
// the two cannot lose its index entry.
//
// Input:
// KEYS[1] -> the queue LIST (keyspace.RedriveQueue)
// KEYS[2] -> the subscription's index SET (keyspace.RedriveIndex)
// --
// ARGV[1] -> the entry, as queued
// ARGV[2] -> the queue's index member
//
// Output:
// the number of entries removed (0 or 1)
var doneCmd = redis.NewScript(`
local n = redis.call('LREM', KEYS[1], 1, ARGV[1])
if redis.call('LLEN', KEYS[1]) == 0 then
  redis.call('SREM', KEYS[2], ARGV[2])
end
return n
`)

// Done takes a redrive Next returned out of its queue.
func (q *Queue) Done(ctx context.Context, r Redrive) error {
	keys := []string{q.keys.RedriveQueue(r.Subscription, r.Topic, r.Partition), q.keys.RedriveIndex(r.Subscription)}
	if err := doneCmd.Run(ctx, q.rdb, keys, r.raw, indexMember(r.Topic, r.Partition)).Err(); err != nil {
		return fmt.Errorf("deadletter: redrive %s done: %w", r.ID, err)
	}
	return nil
}

// DeleteSubscription forgets every redrive queued for a deleted
// subscription.
func (q *Queue) DeleteSubscription(ctx context.Context, subscription string) error {
	index := q.keys.RedriveIndex(subscription)
	sources, err := q.Queued(ctx, subscription)
	if err != nil {
		return fmt.Errorf("deadletter: delete redrives of %s: %w", subscription, err)
	}
	_, err = q.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, s := range sources {
			p.Unlink(ctx, q.keys.RedriveQueue(subscription, s.Topic, s.Partition))
		}
		p.Unlink(ctx, index)
		return nil
	})
	if err != nil {
		return fmt.Errorf("deadletter: delete redrives of %s: %w", subscription, err)
	}
	return nil
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "rdr_" + hex.EncodeToString(b[:])
}
