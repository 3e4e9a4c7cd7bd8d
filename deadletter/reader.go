package deadletter

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/subscription"
)

// Enqueuer queues redrives for the owners of their source partitions,
// all or none; Queue implements it.
type Enqueuer interface {
	Push(ctx context.Context, subscription string, rs []Redrive) error
}

// ReaderConfig tunes a Reader; zero values mean the defaults.
type ReaderConfig struct {
	// MaxScan bounds the dead-letter records one listing or redrive reads.
	// Default 100000.
	MaxScan int
}

// Reader lists and redrives a subscription's dead letters.
type Reader struct {
	opts []kgo.Opt
	cl   *kgo.Client
	adm  *kadm.Client
	q    Enqueuer
	cfg  ReaderConfig
}

// NewReader builds a Reader with its own Kafka client from opts (seed
// brokers, TLS, SASL: the options every client of the node gets); each
// partition read gets a short-lived client from the same options. Close
// releases it. Redrives go to q.
func NewReader(opts []kgo.Opt, q Enqueuer, cfg ReaderConfig) (*Reader, error) {
	if q == nil {
		return nil, fmt.Errorf("deadletter: NewReader: an Enqueuer is required")
	}
	if cfg.MaxScan < 0 {
		return nil, fmt.Errorf("deadletter: ReaderConfig.MaxScan must not be negative, got %d", cfg.MaxScan)
	}
	if cfg.MaxScan == 0 {
		cfg.MaxScan = 100000
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("deadletter: client: %w", err)
	}
	return &Reader{opts: opts, cl: cl, adm: kadm.NewClient(cl), q: q, cfg: cfg}, nil
}

// Close releases the reader's Kafka client.
func (d *Reader) Close() { d.cl.Close() }

// cursor is where a dead-letter listing goes on.
type cursor struct {
	Topic     string `json:"t"`
	Partition int32  `json:"p"`
	Offset    int64  `json:"o"`
}

func encodeCursor(c cursor) string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (cursor, error) {
	var c cursor
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil || c.Topic == "" || c.Partition < 0 || c.Offset < 0 {
		return c, fmt.Errorf("deadletter: %w", subscription.ErrInvalidCursor)
	}
	return c, nil
}

// dlqPartition is one dead-letter partition's readable range.
type dlqPartition struct {
	topic      string
	partition  int32
	start, end int64
}

func (d *Reader) partitions(ctx context.Context, sub *subscription.Subscription) ([]dlqPartition, error) {
	seen := map[string]bool{}
	var topics []string
	for _, t := range sub.Topics {
		if dt := sub.DeadLetterTopicFor(t); dt != "" && !seen[dt] {
			seen[dt] = true
			topics = append(topics, dt)
		}
	}
	if len(topics) == 0 {
		return nil, nil
	}
	starts, err := d.adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("deadletter: list start offsets: %w", err)
	}
	ends, err := d.adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("deadletter: list end offsets: %w", err)
	}
	var out []dlqPartition
	ends.Each(func(e kadm.ListedOffset) {
		if e.Err != nil { // a dead-letter topic nobody wrote to yet
			return
		}
		s, _ := starts.Lookup(e.Topic, e.Partition)
		out = append(out, dlqPartition{topic: e.Topic, partition: e.Partition, start: s.Offset, end: e.Offset})
	})
	sort.Slice(out, func(i, j int) bool {
		if out[i].topic != out[j].topic {
			return out[i].topic < out[j].topic
		}
		return out[i].partition < out[j].partition
	})
	return out, nil
}

// scan reads dead-letter records of sub from the cursor on, calling fn for
// each of sub's; fn returns false to stop. It returns where it stopped
// ("" at the end), also when MaxScan records were read.
func (d *Reader) scan(ctx context.Context, sub *subscription.Subscription, at string, fn func(*kgo.Record) bool) (string, error) {
	parts, err := d.partitions(ctx, sub)
	if err != nil {
		return "", err
	}
	from := cursor{}
	if at != "" {
		if from, err = decodeCursor(at); err != nil {
			return "", err
		}
	}
	scanned := 0
	for _, p := range parts {
		if at != "" && (p.topic < from.Topic || p.topic == from.Topic && p.partition < from.Partition) {
			continue
		}
		offset := p.start
		if at != "" && p.topic == from.Topic && p.partition == from.Partition {
			offset = max(offset, from.Offset)
		}
		if offset >= p.end {
			continue
		}
		next, stopped, err := d.readPartition(ctx, sub, p, offset, &scanned, fn)
		if err != nil {
			return "", err
		}
		if stopped {
			return encodeCursor(cursor{Topic: p.topic, Partition: p.partition, Offset: next}), nil
		}
	}
	return "", nil
}

func (d *Reader) readPartition(ctx context.Context, sub *subscription.Subscription, p dlqPartition, offset int64, scanned *int, fn func(*kgo.Record) bool) (next int64, stopped bool, err error) {
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), d.opts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{p.topic: {p.partition: kgo.NewOffset().At(offset)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		return 0, false, fmt.Errorf("deadletter: read %s/%d: %w", p.topic, p.partition, err)
	}
	defer cl.Close()
	next = offset
	for next < p.end {
		if *scanned >= d.cfg.MaxScan {
			return next, true, nil
		}
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return 0, false, err
		}
		if errs := fetches.Errors(); len(errs) > 0 {
			return 0, false, fmt.Errorf("deadletter: read %s/%d: %w", p.topic, p.partition, errs[0].Err)
		}
		var stop bool
		fetches.EachRecord(func(r *kgo.Record) {
			if stop || r.Offset < next || r.Offset >= p.end {
				return
			}
			next = r.Offset + 1
			*scanned++
			if belongs(sub, r) && !fn(r) {
				stop = true
			}
		})
		if stop {
			return next, true, nil
		}
	}
	return next, false, nil
}

// DeadLetters lists a page of the subscription's dead letters, oldest
// first within each dead-letter partition. A cursor it did not make gives
// an error wrapping subscription.ErrInvalidCursor.
func (d *Reader) DeadLetters(ctx context.Context, sub *subscription.Subscription, limit int, cursor string) (*subscription.DeadLetterPage, error) {
	if limit <= 0 {
		limit = subscription.DefaultDeadLetterLimit
	}
	page := &subscription.DeadLetterPage{Items: []subscription.DeadLetter{}}
	next, err := d.scan(ctx, sub, cursor, func(r *kgo.Record) bool {
		page.Items = append(page.Items, toDeadLetter(r))
		return len(page.Items) < limit
	})
	if err != nil {
		return nil, err
	}
	page.NextCursor = next
	return page, nil
}

func toDeadLetter(r *kgo.Record) subscription.DeadLetter {
	src := sourceOf(r)
	dl := subscription.DeadLetter{
		ID:               src.deliveryID,
		Topic:            src.topic,
		Partition:        src.partition,
		Offset:           src.offset,
		DeadLetterTopic:  r.Topic,
		DeadLetterOffset: r.Offset,
		Error:            Header(r, HeaderError),
	}
	dl.Status, _ = strconv.Atoi(Header(r, HeaderStatus))
	dl.Attempts, _ = strconv.Atoi(Header(r, HeaderAttempts))
	dl.FirstAttempt, _ = time.Parse(time.RFC3339Nano, Header(r, HeaderFirstAttempt))
	dl.LastAttempt, _ = time.Parse(time.RFC3339Nano, Header(r, HeaderLastAttempt))
	dl.Key, dl.KeyBase64 = subscription.KeyText(r.Key)
	dl.ValueSize = len(r.Value)
	if dropped, err := strconv.Atoi(Header(r, HeaderValueDropped)); err == nil {
		dl.ValueSize, dl.ValueDropped = dropped, true
	}
	if v := r.Value; len(v) > 0 {
		if len(v) > subscription.DeadLetterValueExcerpt {
			v, dl.ValueTruncated = v[:subscription.DeadLetterValueExcerpt], true
			// An excerpt cut inside a character is still text: the
			// partial character goes, not the whole excerpt.
			for i := 0; i < utf8.UTFMax && len(v) > 0 && !utf8.Valid(v); i++ {
				v = v[:len(v)-1]
			}
		}
		if utf8.Valid(v) {
			dl.Value = string(v)
		} else {
			dl.ValueBase64 = base64.StdEncoding.EncodeToString(v)
		}
	}
	for _, h := range original(r) {
		if dl.Headers == nil {
			dl.Headers = map[string]string{}
		}
		dl.Headers[h.Key] = string(h.Value)
	}
	return dl
}

// Redrive queues again the subscription's dead letters with the given ids
// (all of them, up to subscription.MaxRedriveIDs, when ids is nil) for
// the owners of their source partitions, and reports how many it queued:
// the dead letters found. Unknown ids are not counted. Each owner sends
// its partition's redrives through the key's lane, under the delivery ids
// they had so endpoints can deduplicate: a key's redrives in offset
// order, one at a time, never beside a record of the key in flight. The
// dead letters stay where they are (dead-letter topics are append-only),
// and one the endpoint refuses again is not dead-lettered twice.
func (d *Reader) Redrive(ctx context.Context, sub *subscription.Subscription, ids []string) (int, error) {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	// A record dead-lettered twice (failed again after a seek) is listed
	// twice under one delivery id: it is sent once.
	seen := map[string]bool{}
	var rs []Redrive
	_, err := d.scan(ctx, sub, "", func(r *kgo.Record) bool {
		if src := sourceOf(r); !seen[src.deliveryID] && (ids == nil || want[src.deliveryID]) {
			seen[src.deliveryID] = true
			rd := Redrive{
				DeliveryID: src.deliveryID, Topic: src.topic, Partition: src.partition, Offset: src.offset,
				Key: r.Key, Value: r.Value, Timestamp: r.Timestamp,
			}
			for _, h := range original(r) {
				rd.Headers = append(rd.Headers, RedriveHeader{Key: h.Key, Value: h.Value})
			}
			rs = append(rs, rd)
		}
		if ids == nil {
			return len(rs) < subscription.MaxRedriveIDs
		}
		return len(rs) < len(want)
	})
	if err != nil {
		return 0, err
	}
	// Dead letters of one partition are in the order they failed, which
	// for a key is not always its offset order (a seek, two dead-letter
	// partitions): the queue gets each source partition in offset order.
	sort.SliceStable(rs, func(i, j int) bool {
		a, b := rs[i], rs[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		if a.Partition != b.Partition {
			return a.Partition < b.Partition
		}
		return a.Offset < b.Offset
	})
	if err := d.q.Push(ctx, sub.ID, rs); err != nil {
		return 0, err
	}
	return len(rs), nil
}
