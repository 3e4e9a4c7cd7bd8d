package dispatcher

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/webhooks"
)

// SubscriptionUpdater changes a stored subscription atomically;
// subscription.Store implements it.
type SubscriptionUpdater interface {
	Update(ctx context.Context, id string, expectedVersion int64, fn func(*subscription.Subscription) error) (*subscription.Subscription, error)
}

// TrackingResetter forgets a subscription's tracking state;
// tracking.Store implements it.
type TrackingResetter interface {
	DeleteSubscription(ctx context.Context, subscriptionID string) error
}

// AdminConfig tunes an Admin; zero values mean the defaults.
type AdminConfig struct {
	// StopTimeout bounds how long a seek waits for every node to leave the
	// subscription's group (drain, flush, commit). Default 60s.
	StopTimeout time.Duration
	// Retry is the node's default retry policy, under each subscription's.
	Retry webhooks.RetryPolicy
	// RedriveAttempts bounds the attempts of each redriven delivery.
	// Default 3.
	RedriveAttempts int
	// MaxScan bounds the dead-letter records one listing or redrive reads.
	// Default 100000.
	MaxScan int
}

// Admin carries out the operations an operator asks of a subscription's
// Kafka side: seek, dead-letter listing and redrive.
type Admin struct {
	opts    []kgo.Opt
	cl      *kgo.Client
	adm     *kadm.Client
	subs    SubscriptionUpdater
	tracker TrackingResetter
	sender  Sender
	cfg     AdminConfig
}

// NewAdmin builds an Admin with its own Kafka client from opts (seed
// brokers, TLS, SASL: the same options every client of the node gets).
// Close releases it.
func NewAdmin(opts []kgo.Opt, subs SubscriptionUpdater, tracker TrackingResetter, sender Sender, cfg AdminConfig) (*Admin, error) {
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = time.Minute
	}
	if cfg.RedriveAttempts == 0 {
		cfg.RedriveAttempts = 3
	}
	if cfg.MaxScan == 0 {
		cfg.MaxScan = 100000
	}
	cfg.Retry = cfg.Retry.WithDefaults()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("dispatcher: admin client: %w", err)
	}
	return &Admin{opts: opts, cl: cl, adm: kadm.NewClient(cl), subs: subs, tracker: tracker, sender: sender, cfg: cfg}, nil
}

// Close releases the admin's Kafka client.
func (a *Admin) Close() { a.cl.Close() }

// Seek moves the subscription's consumer group. It is applied safely: the
// subscription is paused so every node drains its in-flight deliveries,
// commits and leaves the group; once the group is empty the commits are
// rewritten and the tracking state (acked ranges) is dropped, so records
// after the new position are delivered again; then the subscription's
// paused state is restored and nodes resume from the new commits.
func (a *Admin) Seek(ctx context.Context, sub *subscription.Subscription, req subscription.SeekRequest) (*subscription.SeekResult, error) {
	if errs := req.Validate(sub); len(errs) > 0 {
		return nil, &subscription.ValidationError{Errors: errs}
	}
	targets, err := a.seekTargets(ctx, sub, req)
	if err != nil {
		return nil, err
	}
	wasPaused := false
	if _, err := a.subs.Update(ctx, sub.ID, subscription.AnyVersion, func(s *subscription.Subscription) error {
		wasPaused = s.Paused
		s.Paused = true
		return nil
	}); err != nil {
		return nil, fmt.Errorf("dispatcher: seek: pause: %w", err)
	}
	restore := func() error {
		// Restoring must happen even when the caller has gone away.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_, err := a.subs.Update(rctx, sub.ID, subscription.AnyVersion, func(s *subscription.Subscription) error {
			s.Paused = wasPaused
			return nil
		})
		return err
	}
	res, err := a.rewrite(ctx, sub, targets)
	if rerr := restore(); rerr != nil {
		err = errors.Join(err, fmt.Errorf("dispatcher: seek: resume: %w", rerr))
	}
	return res, err
}

func (a *Admin) rewrite(ctx context.Context, sub *subscription.Subscription, targets kadm.Offsets) (*subscription.SeekResult, error) {
	if err := a.waitGroupEmpty(ctx, sub.GroupID()); err != nil {
		return nil, err
	}
	before, err := a.adm.FetchOffsets(ctx, sub.GroupID())
	// No node has consumed yet: no group, nothing committed.
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return nil, fmt.Errorf("dispatcher: seek: read commits: %w", err)
	}
	resp, err := a.adm.CommitOffsets(ctx, sub.GroupID(), targets)
	if err != nil {
		return nil, fmt.Errorf("dispatcher: seek: commit: %w", err)
	}
	if err := resp.Error(); err != nil {
		return nil, fmt.Errorf("dispatcher: seek: commit: %w", err)
	}
	if err := a.tracker.DeleteSubscription(ctx, sub.ID); err != nil {
		return nil, fmt.Errorf("dispatcher: seek: reset tracking: %w", err)
	}
	out := &subscription.SeekResult{SubscriptionID: sub.ID, Partitions: []subscription.SeekedPartition{}}
	targets.Each(func(o kadm.Offset) {
		prev := int64(-1)
		if b, ok := before.Lookup(o.Topic, o.Partition); ok && b.Err == nil {
			prev = b.At
		}
		out.Partitions = append(out.Partitions, subscription.SeekedPartition{Topic: o.Topic, Partition: o.Partition, Previous: prev, Offset: o.At})
	})
	sort.Slice(out.Partitions, func(i, j int) bool {
		x, y := out.Partitions[i], out.Partitions[j]
		if x.Topic != y.Topic {
			return x.Topic < y.Topic
		}
		return x.Partition < y.Partition
	})
	return out, nil
}

// seekTargets resolves the request to one offset per partition, clamped to
// what each partition retains.
func (a *Admin) seekTargets(ctx context.Context, sub *subscription.Subscription, req subscription.SeekRequest) (kadm.Offsets, error) {
	starts, err := a.adm.ListStartOffsets(ctx, sub.Topics...)
	if err != nil {
		return nil, fmt.Errorf("dispatcher: seek: list start offsets: %w", err)
	}
	ends, err := a.adm.ListEndOffsets(ctx, sub.Topics...)
	if err != nil {
		return nil, fmt.Errorf("dispatcher: seek: list end offsets: %w", err)
	}
	if err := errorBesidesUnknownTopics(ends); err != nil {
		return nil, fmt.Errorf("dispatcher: seek: list end offsets: %w", err)
	}
	var at kadm.ListedOffsets
	switch req.To {
	case subscription.SeekEarliest:
		at = starts
	case subscription.SeekLatest:
		at = ends
	case subscription.SeekTimestamp:
		if at, err = a.adm.ListOffsetsAfterMilli(ctx, req.Timestamp.UnixMilli(), sub.Topics...); err != nil {
			return nil, fmt.Errorf("dispatcher: seek: list offsets after %s: %w", req.Timestamp, err)
		}
	}
	targets := make(kadm.Offsets)
	clamp := func(topic string, p int32, o int64) int64 {
		if s, ok := starts.Lookup(topic, p); ok && o < s.Offset {
			o = s.Offset
		}
		if e, ok := ends.Lookup(topic, p); ok && (o > e.Offset || o < 0) {
			o = e.Offset // ListOffsetsAfterMilli answers -1 past the end
		}
		return o
	}
	if req.To == subscription.SeekOffsets {
		var errs []subscription.FieldError
		for i, o := range req.Offsets {
			if _, ok := ends.Lookup(o.Topic, o.Partition); !ok {
				errs = append(errs, subscription.FieldError{Field: "offsets[" + strconv.Itoa(i) + "].partition", Message: fmt.Sprintf("topic %q has no partition %d", o.Topic, o.Partition)})
				continue
			}
			targets.AddOffset(o.Topic, o.Partition, clamp(o.Topic, o.Partition, o.Offset), -1)
		}
		if len(errs) > 0 {
			return nil, &subscription.ValidationError{Errors: errs}
		}
		return targets, nil
	}
	at.Each(func(l kadm.ListedOffset) {
		if l.Err == nil {
			targets.AddOffset(l.Topic, l.Partition, clamp(l.Topic, l.Partition, l.Offset), -1)
		}
	})
	return targets, nil
}

// errorBesidesUnknownTopics is the first error of l other than a topic that
// does not exist: such a topic (not created yet, or deleted) has nothing to
// move, and the subscription's other topics still seek.
func errorBesidesUnknownTopics(l kadm.ListedOffsets) error {
	var first error
	l.Each(func(o kadm.ListedOffset) {
		if first == nil && o.Err != nil && !errors.Is(o.Err, kerr.UnknownTopicOrPartition) {
			first = o.Err
		}
	})
	return first
}

// waitGroupEmpty waits until no member is left in the group.
func (a *Admin) waitGroupEmpty(ctx context.Context, group string) error {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.StopTimeout)
	defer cancel()
	for {
		described, err := a.adm.DescribeGroups(ctx, group)
		if err == nil {
			if g, ok := described[group]; ok && (g.Err == nil && len(g.Members) == 0 || errors.Is(g.Err, kerr.GroupIDNotFound)) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("dispatcher: seek: consumers of group %s did not stop within %v: %w", group, a.cfg.StopTimeout, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// deadLetterCursor is where a dead-letter listing goes on.
type deadLetterCursor struct {
	Topic     string `json:"t"`
	Partition int32  `json:"p"`
	Offset    int64  `json:"o"`
}

func encodeCursor(c deadLetterCursor) string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (deadLetterCursor, error) {
	var c deadLetterCursor
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil || c.Topic == "" || c.Partition < 0 || c.Offset < 0 {
		return c, fmt.Errorf("dispatcher: dead letters: %w", subscription.ErrInvalidCursor)
	}
	return c, nil
}

// dlqPartition is one dead-letter partition's readable range.
type dlqPartition struct {
	topic      string
	partition  int32
	start, end int64
}

func (a *Admin) dlqPartitions(ctx context.Context, sub *subscription.Subscription) ([]dlqPartition, error) {
	seen := map[string]bool{}
	var topics []string
	for _, t := range sub.Topics {
		if d := sub.DeadLetterTopicFor(t); d != "" && !seen[d] {
			seen[d] = true
			topics = append(topics, d)
		}
	}
	if len(topics) == 0 {
		return nil, nil
	}
	starts, err := a.adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("dispatcher: dead letters: %w", err)
	}
	ends, err := a.adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("dispatcher: dead letters: %w", err)
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

// scanDeadLetters reads dead-letter records of sub from the cursor on,
// calling fn for each of sub's; fn returns false to stop. It returns where
// it stopped ("" at the end) or when MaxScan records were read.
func (a *Admin) scanDeadLetters(ctx context.Context, sub *subscription.Subscription, cursor string, fn func(*kgo.Record) bool) (string, error) {
	parts, err := a.dlqPartitions(ctx, sub)
	if err != nil {
		return "", err
	}
	from := deadLetterCursor{}
	if cursor != "" {
		if from, err = decodeCursor(cursor); err != nil {
			return "", err
		}
	}
	scanned := 0
	for _, p := range parts {
		if cursor != "" && (p.topic < from.Topic || p.topic == from.Topic && p.partition < from.Partition) {
			continue
		}
		offset := p.start
		if cursor != "" && p.topic == from.Topic && p.partition == from.Partition {
			offset = max(offset, from.Offset)
		}
		if offset >= p.end {
			continue
		}
		next, stopped, err := a.readPartition(ctx, sub, p, offset, &scanned, fn)
		if err != nil {
			return "", err
		}
		if stopped {
			return encodeCursor(deadLetterCursor{Topic: p.topic, Partition: p.partition, Offset: next}), nil
		}
	}
	return "", nil
}

func (a *Admin) readPartition(ctx context.Context, sub *subscription.Subscription, p dlqPartition, offset int64, scanned *int, fn func(*kgo.Record) bool) (next int64, stopped bool, err error) {
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), a.opts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{p.topic: {p.partition: kgo.NewOffset().At(offset)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		return 0, false, fmt.Errorf("dispatcher: dead letters: %w", err)
	}
	defer cl.Close()
	next = offset
	for next < p.end {
		if *scanned >= a.cfg.MaxScan {
			return next, true, nil
		}
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return 0, false, err
		}
		if errs := fetches.Errors(); len(errs) > 0 {
			return 0, false, fmt.Errorf("dispatcher: dead letters: read %s/%d: %w", p.topic, p.partition, errs[0].Err)
		}
		var stop bool
		fetches.EachRecord(func(r *kgo.Record) {
			if stop || r.Offset < next || r.Offset >= p.end {
				return
			}
			next = r.Offset + 1
			*scanned++
			if header(r, DLQHeaderSubscription) == sub.ID && !fn(r) {
				stop = true
			}
		})
		if stop {
			return next, true, nil
		}
	}
	return next, false, nil
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// DeadLetters lists a page of the subscription's dead letters, oldest
// first within each dead-letter partition.
func (a *Admin) DeadLetters(ctx context.Context, sub *subscription.Subscription, limit int, cursor string) (*subscription.DeadLetterPage, error) {
	if limit <= 0 {
		limit = subscription.DefaultDeadLetterLimit
	}
	page := &subscription.DeadLetterPage{Items: []subscription.DeadLetter{}}
	next, err := a.scanDeadLetters(ctx, sub, cursor, func(r *kgo.Record) bool {
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
	d := subscription.DeadLetter{
		ID:               header(r, DLQHeaderDeliveryID),
		Topic:            header(r, DLQHeaderTopic),
		DeadLetterTopic:  r.Topic,
		DeadLetterOffset: r.Offset,
		Error:            header(r, DLQHeaderError),
	}
	p, _ := strconv.ParseInt(header(r, DLQHeaderPartition), 10, 32)
	d.Partition = int32(p)
	d.Offset, _ = strconv.ParseInt(header(r, DLQHeaderOffset), 10, 64)
	d.Status, _ = strconv.Atoi(header(r, DLQHeaderStatus))
	d.Attempts, _ = strconv.Atoi(header(r, DLQHeaderAttempts))
	d.FirstAttempt, _ = time.Parse(time.RFC3339Nano, header(r, DLQHeaderFirstAttempt))
	d.LastAttempt, _ = time.Parse(time.RFC3339Nano, header(r, DLQHeaderLastAttempt))
	if r.Key != nil {
		if utf8.Valid(r.Key) && !strings.ContainsFunc(string(r.Key), func(c rune) bool { return c < 0x20 || c == 0x7f }) {
			d.Key = string(r.Key)
		} else {
			d.KeyBase64 = base64.StdEncoding.EncodeToString(r.Key)
		}
	}
	for _, h := range originalHeaders(r) {
		if d.Headers == nil {
			d.Headers = map[string]string{}
		}
		d.Headers[h.Key] = string(h.Value)
	}
	return d
}

// originalHeaders drops the headers keyhook added when dead-lettering.
func originalHeaders(r *kgo.Record) []kgo.RecordHeader {
	var out []kgo.RecordHeader
	for _, h := range r.Headers {
		if !strings.HasPrefix(h.Key, "keyhook-") {
			out = append(out, h)
		}
	}
	return out
}

// Redrive delivers again the subscription's dead letters with the given
// ids (all of them when ids is nil), with the same delivery ids as before
// so endpoints can deduplicate, and reports how many were delivered. Each
// gets at most RedriveAttempts attempts; one that fails stays where it is.
// Dead-letter topics are append-only: a redriven record is still listed.
func (a *Admin) Redrive(ctx context.Context, sub *subscription.Subscription, ids []string) (int, error) {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var records []*kgo.Record
	_, err := a.scanDeadLetters(ctx, sub, "", func(r *kgo.Record) bool {
		if ids == nil || want[header(r, DLQHeaderDeliveryID)] {
			records = append(records, r)
		}
		return ids == nil && len(records) < subscription.MaxRedriveIDs || ids != nil && len(records) < len(ids)
	})
	if err != nil {
		return 0, err
	}
	policy := sub.Retry.Policy(a.cfg.Retry)
	policy.MaxAttempts = a.cfg.RedriveAttempts
	signer, auth := sub.Signer(time.Now()), sub.Endpoint.Auth.Auth()
	timeout := time.Duration(sub.Endpoint.TimeoutMS) * time.Millisecond

	var mu sync.Mutex
	delivered := 0
	sem := make(chan struct{}, min(max(sub.MaxInFlight, 1), 16))
	var wg sync.WaitGroup
	for _, dl := range records {
		src := &kgo.Record{
			Key: dl.Key, Value: dl.Value, Headers: originalHeaders(dl), Timestamp: dl.Timestamp,
			Topic: header(dl, DLQHeaderTopic),
		}
		p, _ := strconv.ParseInt(header(dl, DLQHeaderPartition), 10, 32)
		src.Partition = int32(p)
		src.Offset, _ = strconv.ParseInt(header(dl, DLQHeaderOffset), 10, 64)
		req, err := newRequest(sub, src, header(dl, DLQHeaderDeliveryID))
		if err != nil {
			continue // it cannot be encoded now any more than before
		}
		req.Signer, req.Auth, req.Timeout = signer, auth, timeout
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return delivered, ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if a.sender.Deliver(ctx, req, policy, nil).Outcome == webhooks.OutcomeSuccess {
				mu.Lock()
				delivered++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return delivered, nil
}
