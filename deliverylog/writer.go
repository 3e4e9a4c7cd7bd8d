package deliverylog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"

	"github.com/keyhook/keyhook/internal/keyspace"
)

// Defaults of WriterConfig.
const (
	DefaultTTL           = 24 * time.Hour
	DefaultMaxDeliveries = 10000
	DefaultMaxAttempts   = 20
	DefaultFlushInterval = 5 * time.Millisecond
	DefaultBuffer        = 8192
	// maxBatch bounds the attempts of one write round.
	maxBatch = 1024
)

// WriterConfig tunes a Writer. The zero value of every field means its
// default.
type WriterConfig struct {
	// TTL is how long a delivery's attempts are kept after its latest.
	// Default 24h.
	TTL time.Duration
	// MaxDeliveries caps the deliveries kept per subscription; past it
	// the one with the oldest latest attempt goes. Default 10000: with
	// 1 KiB excerpts, about 15 MiB of Redis per subscription at most.
	MaxDeliveries int
	// MaxAttempts caps the attempts kept per delivery, the latest ones.
	// Default 20.
	MaxAttempts int
	// BodyBytes bounds the excerpt of a response body. Default 1024.
	BodyBytes int
	// FlushInterval is how long attempts gather before a write round.
	// Default 5ms.
	FlushInterval time.Duration
	// Buffer is how many attempts may wait for the writer; past it an
	// attempt is dropped and counted (keyhook_delivery_log_dropped_total).
	// Default 8192.
	Buffer int
	// Keyspace names the keys. Default the default keyspace.
	Keyspace keyspace.Keyspace
	// Logger receives write failures. Default slog.Default().
	Logger *slog.Logger
	// MeterProvider receives the counters. Default no-op.
	MeterProvider metric.MeterProvider
}

// Writer writes attempts to the log off the delivery goroutines. Log
// hands it an attempt; the goroutine of Run writes them.
type Writer struct {
	cfg WriterConfig
	rdb redis.UniversalClient
	log *slog.Logger
	// in carries attempts from Log to Run; its capacity is cfg.Buffer.
	in chan Entry

	written, dropped, failed metric.Int64Counter
}

// NewWriter builds a Writer over rdb; nothing is written until Run.
func NewWriter(rdb redis.UniversalClient, cfg WriterConfig) (*Writer, error) {
	if rdb == nil {
		return nil, errors.New("deliverylog: a Redis client is required")
	}
	for _, f := range []struct {
		name string
		bad  bool
	}{
		{"TTL", cfg.TTL < 0}, {"MaxDeliveries", cfg.MaxDeliveries < 0}, {"MaxAttempts", cfg.MaxAttempts < 0},
		{"BodyBytes", cfg.BodyBytes < 0}, {"FlushInterval", cfg.FlushInterval < 0}, {"Buffer", cfg.Buffer < 0},
	} {
		if f.bad {
			return nil, &FieldError{Field: f.name, Err: errors.New("must not be negative")}
		}
	}
	if cfg.TTL > 0 && cfg.TTL < time.Second {
		return nil, &FieldError{Field: "TTL", Err: fmt.Errorf("is %v, must be at least 1s", cfg.TTL)}
	}
	if err := cfg.Keyspace.Validate(); err != nil {
		return nil, fmt.Errorf("deliverylog: %w", err)
	}
	cfg = cfg.withDefaults()
	w := &Writer{cfg: cfg, rdb: rdb, log: cfg.Logger, in: make(chan Entry, cfg.Buffer)}
	mp := cfg.MeterProvider
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	m := mp.Meter("github.com/keyhook/keyhook/deliverylog")
	var err error
	if w.written, err = m.Int64Counter("keyhook.delivery_log.written", metric.WithDescription("Attempts written to the delivery log."), metric.WithUnit("{attempt}")); err != nil {
		return nil, err
	}
	if w.dropped, err = m.Int64Counter("keyhook.delivery_log.dropped", metric.WithDescription("Attempts not logged because the log's writer fell behind (its buffer was full): a delivery never waits for the log."), metric.WithUnit("{attempt}")); err != nil {
		return nil, err
	}
	if w.failed, err = m.Int64Counter("keyhook.delivery_log.failed", metric.WithDescription("Attempts not logged because Redis refused or missed the write."), metric.WithUnit("{attempt}")); err != nil {
		return nil, err
	}
	return w, nil
}

func (c WriterConfig) withDefaults() WriterConfig {
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.MaxDeliveries == 0 {
		c.MaxDeliveries = DefaultMaxDeliveries
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.BodyBytes == 0 {
		c.BodyBytes = DefaultBodyBytes
	}
	if c.FlushInterval == 0 {
		c.FlushInterval = DefaultFlushInterval
	}
	if c.Buffer == 0 {
		c.Buffer = DefaultBuffer
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// FieldError is a WriterConfig field the Writer cannot work with.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return "deliverylog: " + e.Field + " " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// BodyBytes is the excerpt size the Writer keeps, for callers that cut
// the body before Log.
func (w *Writer) BodyBytes() int { return w.cfg.BodyBytes }

// Log hands e to the writer and returns at once: when the writer is
// behind (its buffer full), e is dropped and counted. A nil Writer drops
// everything, so callers need not check whether the log is on.
func (w *Writer) Log(e Entry) {
	if w == nil {
		return
	}
	select {
	case w.in <- e:
	default:
		w.dropped.Add(context.Background(), 1)
	}
}

// Run writes what Log hands it, in rounds, until ctx ends; then it writes
// what is left in the buffer (for at most 2 s) and returns nil.
func (w *Writer) Run(ctx context.Context) error {
	batch := make([]Entry, 0, maxBatch)
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			for {
				batch = w.drain(batch[:0])
				if len(batch) == 0 {
					return nil
				}
				w.write(fctx, batch)
			}
		case e := <-w.in:
			batch = append(batch[:0], e)
		}
		// Let the round gather; attempts that come meanwhile wait in the
		// channel, not on the delivery goroutines.
		t := time.NewTimer(w.cfg.FlushInterval)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		batch = w.drain(batch)
		w.write(context.WithoutCancel(ctx), batch)
	}
}

// drain appends what waits in the channel to batch, up to maxBatch.
func (w *Writer) drain(batch []Entry) []Entry {
	for len(batch) < maxBatch {
		select {
		case e := <-w.in:
			batch = append(batch, e)
		default:
			return batch
		}
	}
	return batch
}

// write writes batch, one script call per subscription, pipelined.
func (w *Writer) write(ctx context.Context, batch []Entry) {
	if len(batch) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	bySub := make(map[string][]Entry)
	var order []string
	for _, e := range batch {
		if _, ok := bySub[e.Subscription]; !ok {
			order = append(order, e.Subscription)
		}
		bySub[e.Subscription] = append(bySub[e.Subscription], e)
	}
	now := time.Now().UnixMilli()
	ks := w.cfg.Keyspace
	_, err := w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, sub := range order {
			es := bySub[sub]
			keys := make([]string, 0, 2+len(es))
			keys = append(keys, ks.DeliveryRecent(sub), ks.DeliveryFailed(sub))
			args := make([]any, 0, 5+4*len(es))
			args = append(args, w.cfg.TTL.Milliseconds(), w.cfg.MaxDeliveries, w.cfg.MaxAttempts, now, ks.DeliveryAttemptsPrefix(sub))
			for _, e := range es {
				data, err := json.Marshal(stored{Topic: e.Topic, Partition: e.Partition, Offset: e.Offset, Attempt: e.Attempt})
				if err != nil {
					return err
				}
				failed := "0"
				if e.Attempt.Failed() {
					failed = "1"
				}
				keys = append(keys, ks.DeliveryAttempts(sub, e.DeliveryID))
				args = append(args, e.DeliveryID, strconv.FormatInt(e.Attempt.Time.UnixMilli(), 10), failed, data)
			}
			writeScript.EvalSha(ctx, p, keys, args...)
		}
		return nil
	})
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		if lerr := writeScript.Load(ctx, w.rdb).Err(); lerr == nil {
			w.write(ctx, batch)
			return
		}
	}
	if err != nil {
		w.failed.Add(ctx, int64(len(batch)))
		w.log.Warn("delivery log not written", "attempts", len(batch), "err", err)
		return
	}
	w.written.Add(ctx, int64(len(batch)))
}
