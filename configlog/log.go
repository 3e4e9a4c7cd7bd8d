package configlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Defaults of Config, applied to fields left at zero.
const (
	// DefaultTopic is the topic the log lives in when Config.Topic is
	// empty.
	DefaultTopic = "_keyhook_config"
	// DefaultInterval is how often Run compares Redis with the log when
	// Config.Interval is zero.
	DefaultInterval = time.Second
	// DefaultWriteTimeout bounds one write when Config.WriteTimeout is
	// zero.
	DefaultWriteTimeout = 10 * time.Second
	// TombstoneRetention is the topic's delete.retention.ms when this
	// package creates it: how long a delete stays in the topic after
	// compaction. A Redis restored from a snapshot older than this may
	// bring back an entry deleted before it, as a new entry.
	TombstoneRetention = 7 * 24 * time.Hour
)

// versionHeader carries an entry's version on every record, tombstones
// included (whose value is null).
const versionHeader = "keyhook-version"

// ErrUnavailable is wrapped by Put and Delete when Kafka did not
// acknowledge the write: the change must not be made elsewhere.
var ErrUnavailable = errors.New("configlog: kafka did not acknowledge the write")

// ErrStale is wrapped by Put when the log already holds the entry at a
// higher version, or deleted at the same one: the writer read a Redis
// that is behind the log (lost data not yet restored). Nothing is
// written.
var ErrStale = errors.New("configlog: the log holds a newer version")

// ErrTopicUnfit is wrapped by EnsureTopic when the topic exists but
// cannot hold the log: its cleanup policy is not compact, or it has more
// than one partition (the log is one ordered partition).
var ErrTopicUnfit = errors.New("configlog: topic cannot hold the config log")

// Config holds the Log's tunables. The zero value means defaults.
type Config struct {
	// Topic is the compacted topic the log lives in; EnsureTopic creates
	// it when missing. Default "_keyhook_config".
	Topic string
	// Interval is how often Run compares Redis with the log. Default 1s.
	Interval time.Duration
	// WriteTimeout bounds one Put or Delete, retries included. At least
	// 1s; default 10s.
	WriteTimeout time.Duration
	// Logger receives what Run restores. Default slog.Default().
	Logger *slog.Logger
}

// Validate reports the first invalid field of c. Zero fields are valid:
// they mean the default.
func (c Config) Validate() error {
	if c.Topic != "" {
		if msg := topicProblem(c.Topic); msg != "" {
			return fmt.Errorf("configlog: config: Topic %q %s", c.Topic, msg)
		}
	}
	if c.Interval < 0 {
		return fmt.Errorf("configlog: config: Interval %v must not be negative", c.Interval)
	}
	if c.WriteTimeout < 0 || (c.WriteTimeout > 0 && c.WriteTimeout < time.Second) {
		return fmt.Errorf("configlog: config: WriteTimeout %v must be 0 (default %v) or at least 1s", c.WriteTimeout, DefaultWriteTimeout)
	}
	return nil
}

// topicProblem says what makes name an invalid Kafka topic name, or "".
func topicProblem(name string) string {
	if len(name) > 249 || name == "." || name == ".." {
		return "is not a valid topic name"
	}
	for _, c := range name {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return "may contain only ASCII letters, digits, '.', '_' and '-'"
		}
	}
	return ""
}

func (c Config) withDefaults() Config {
	if c.Topic == "" {
		c.Topic = DefaultTopic
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Log writes configuration changes to the topic and, in Run, restores
// Redis from it. Put and Delete are safe for concurrent use; Run runs once.
type Log struct {
	cfg Config
	cl  *kgo.Client
	adm *kadm.Client

	mu sync.Mutex
	// known holds, per "<kind>/<id>", the version the log holds for the
	// entry and whether it is deleted, as far as this process has read or
	// written it: what Put checks a write against.
	known map[string]mark
}

type mark struct {
	version int64
	deleted bool
}

// note records that the log holds e, read or written after what known
// holds for it.
func (l *Log) note(kind string, e Entry) {
	key := kind + "/" + e.ID
	l.mu.Lock()
	defer l.mu.Unlock()
	if cur, ok := l.known[key]; !ok || e.Version >= cur.version {
		l.known[key] = mark{version: e.Version, deleted: e.Deleted()}
	}
}

// stale reports whether the log holds kind/id past version.
func (l *Log) stale(kind, id string, version int64) (mark, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m, ok := l.known[kind+"/"+id]
	return m, ok && (m.version > version || (m.version == version && m.deleted))
}

// New returns a Log over its own Kafka client, built from opts (seed
// brokers, TLS, SASL) and closed by Close. It reads the topic's only
// partition from its start; call EnsureTopic before Run.
func New(opts []kgo.Opt, cfg Config) (*Log, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	all := append([]kgo.Opt{}, opts...)
	all = append(all,
		// Every in-sync replica must have the change before the API
		// answers; idempotence (kgo's default) keeps retries from
		// reordering one key's records.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		// The log is partition 0, whatever the key.
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RecordDeliveryTimeout(cfg.WriteTimeout),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cfg.Topic: {0: kgo.NewOffset().AtStart()}}),
	)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return nil, fmt.Errorf("configlog: kafka client: %w", err)
	}
	return &Log{cfg: cfg, cl: cl, adm: kadm.NewClient(cl), known: make(map[string]mark)}, nil
}

// Topic is the topic the log lives in.
func (l *Log) Topic() string { return l.cfg.Topic }

// Close releases the Kafka client, after Run returned.
func (l *Log) Close() { l.cl.Close() }

// EnsureTopic creates the topic when it is missing: one partition, the
// cluster's default replication, cleanup.policy=compact and
// delete.retention.ms of TombstoneRetention. An existing topic must be
// compacted (a topic that deletes by age would lose entries nobody
// changed for a while) and have one partition; otherwise the error wraps
// ErrTopicUnfit.
func (l *Log) EnsureTopic(ctx context.Context) error {
	configs := map[string]*string{
		"cleanup.policy":      kadm.StringPtr("compact"),
		"delete.retention.ms": kadm.StringPtr(strconv.FormatInt(TombstoneRetention.Milliseconds(), 10)),
	}
	res, err := l.adm.CreateTopic(ctx, 1, -1, configs, l.cfg.Topic)
	if err == nil {
		err = res.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("configlog: create topic %q: %w", l.cfg.Topic, err)
	}
	// Right after the create, the broker may not know the topic yet: its
	// metadata and configs answer UNKNOWN_TOPIC_OR_PARTITION for a moment.
	deadline := time.Now().Add(topicSettleTimeout)
	for {
		err := l.checkTopic(ctx)
		if err == nil || !kerr.IsRetriable(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// topicSettleTimeout bounds how long EnsureTopic waits for the broker to
// know a topic it just created.
const topicSettleTimeout = 15 * time.Second

// checkTopic refuses a topic that is not one compacted partition.
func (l *Log) checkTopic(ctx context.Context) error {
	topics, err := l.adm.ListTopics(ctx, l.cfg.Topic)
	if err != nil {
		return fmt.Errorf("configlog: describe topic %q: %w", l.cfg.Topic, err)
	}
	td, ok := topics[l.cfg.Topic]
	if ok && td.Err != nil {
		return fmt.Errorf("configlog: describe topic %q: %w", l.cfg.Topic, td.Err)
	}
	if ok && len(td.Partitions) != 1 {
		return fmt.Errorf("configlog: topic %q has %d partitions, want 1: %w", l.cfg.Topic, len(td.Partitions), ErrTopicUnfit)
	}
	described, err := l.adm.DescribeTopicConfigs(ctx, l.cfg.Topic)
	if err != nil {
		return fmt.Errorf("configlog: describe topic %q: %w", l.cfg.Topic, err)
	}
	rc, err := described.On(l.cfg.Topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return fmt.Errorf("configlog: describe topic %q: %w", l.cfg.Topic, err)
	}
	for _, c := range rc.Configs {
		if c.Key == "cleanup.policy" && !strings.Contains(c.MaybeValue(), "compact") {
			return fmt.Errorf("configlog: topic %q has cleanup.policy=%s, want compact: %w", l.cfg.Topic, c.MaybeValue(), ErrTopicUnfit)
		}
	}
	return nil
}

// Put records that the entry kind/id now has data at version, and
// returns once Kafka acknowledged it (an error wrapping ErrUnavailable
// otherwise). A version the log is known to have passed — a higher one,
// or a delete at the same one, read by Run or written by this Log — is
// refused with an error wrapping ErrStale: the change was computed from a
// Redis that has not been restored yet.
func (l *Log) Put(ctx context.Context, kind, id string, version int64, data []byte) error {
	if m, stale := l.stale(kind, id, version); stale {
		return fmt.Errorf("configlog: write %s/%s at version %d: the log holds version %d (deleted: %t): %w", kind, id, version, m.version, m.deleted, ErrStale)
	}
	if data == nil {
		data = []byte{}
	}
	return l.write(ctx, kind, id, Entry{ID: id, Version: version, Data: data})
}

// Restate records again what Redis holds for kind/id — data at version —
// after a change the log recorded lost its race in Redis to another one:
// the winner's record must be the log's last. Unlike Put it is never
// refused as stale: the loser's record is what made the log look ahead.
func (l *Log) Restate(ctx context.Context, kind, id string, version int64, data []byte) error {
	return l.write(ctx, kind, id, Entry{ID: id, Version: version, Data: data})
}

// Delete records that the entry kind/id is deleted; version must be above
// the last version it had. It returns once Kafka acknowledged it (an
// error wrapping ErrUnavailable otherwise).
func (l *Log) Delete(ctx context.Context, kind, id string, version int64) error {
	return l.write(ctx, kind, id, Entry{ID: id, Version: version})
}

func (l *Log) write(ctx context.Context, kind, id string, e Entry) error {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.WriteTimeout)
	defer cancel()
	if err := l.cl.ProduceSync(ctx, l.record(kind, e)).FirstErr(); err != nil {
		return fmt.Errorf("configlog: write %s/%s: %w: %w", kind, id, ErrUnavailable, err)
	}
	l.note(kind, e)
	return nil
}

func (l *Log) record(kind string, e Entry) *kgo.Record {
	return &kgo.Record{
		Topic:     l.cfg.Topic,
		Partition: 0,
		Key:       []byte(kind + "/" + e.ID),
		Value:     e.Data,
		Headers:   []kgo.RecordHeader{{Key: versionHeader, Value: []byte(strconv.FormatInt(e.Version, 10))}},
	}
}

// decode reads a record of the topic; ok is false for a record this
// package did not write.
func decode(r *kgo.Record) (kind string, e Entry, ok bool) {
	kind, id, found := strings.Cut(string(r.Key), "/")
	if !found || kind == "" || id == "" {
		return "", Entry{}, false
	}
	for _, h := range r.Headers {
		if h.Key != versionHeader {
			continue
		}
		v, err := strconv.ParseInt(string(h.Value), 10, 64)
		if err != nil {
			return "", Entry{}, false
		}
		return kind, Entry{ID: id, Version: v, Data: r.Value}, true
	}
	return "", Entry{}, false
}
