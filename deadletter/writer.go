package deadletter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/internal/backoff"
)

// ErrLoop is returned (wrapped) by Write for a record that is already a
// dead letter of the same subscription, or has been dead-lettered MaxHops
// times: writing it again would feed a loop. Nothing is lost by not
// writing it: the record stays in the dead-letter topic it was read from.
var ErrLoop = errors.New("deadletter: dead-letter loop")

// Producer writes records synchronously; *kgo.Client implements it.
type Producer interface {
	ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults
}

// Letter is a record that failed for good and why.
type Letter struct {
	// Subscription is the id of the subscription that gave up on Record.
	Subscription string
	// Record is the source record as it was consumed.
	Record *kgo.Record
	// Topic is the dead-letter topic to write to.
	Topic string
	// DeliveryID is the delivery id the endpoint saw.
	DeliveryID string
	// Status is the HTTP status of the last attempt, 0 when none came.
	Status int
	// Error says why the last attempt failed when it got no response.
	Error string
	// Attempts counts the attempts made; First and Last are when the first
	// and the last started.
	Attempts    int
	First, Last time.Time
	// TraceID, when set, is logged with the outcome.
	TraceID string
}

// WriterConfig tunes a Writer; zero values mean the defaults.
type WriterConfig struct {
	// MaxHops is how many times one record may be dead-lettered along a
	// chain of subscriptions (one subscription's dead-letter topic being
	// another's source) before it is refused with ErrLoop. Default 4.
	MaxHops int
	// Logger receives a line per dead letter written or refused and per
	// failed write. Default slog.Default().
	Logger *slog.Logger
	// OnError, when set, is called with each failed write before it is
	// retried (to count them).
	OnError func(err error)
}

// Writer writes dead letters. It is safe for concurrent use.
type Writer struct {
	p   Producer
	cfg WriterConfig
}

// NewWriter builds a Writer that produces through p.
func NewWriter(p Producer, cfg WriterConfig) (*Writer, error) {
	if cfg.MaxHops < 0 {
		return nil, fmt.Errorf("deadletter: WriterConfig.MaxHops must not be negative, got %d", cfg.MaxHops)
	}
	if cfg.MaxHops == 0 {
		cfg.MaxHops = 4
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.OnError == nil {
		cfg.OnError = func(error) {}
	}
	return &Writer{p: p, cfg: cfg}, nil
}

// Write writes l to its dead-letter topic and returns once the write is
// durable. A failed write is retried, with backoff up to 10s, until it
// succeeds or ctx ends (ctx's error): a record is acked only once its dead
// letter is durable. A record too large for the dead-letter topic is
// written without its value. A record that would close a dead-letter loop
// is not written; the error wraps ErrLoop.
func (w *Writer) Write(ctx context.Context, l Letter) error {
	r := l.Record
	path := pathOf(r)
	if slices.Contains(path, l.Subscription) || len(path) >= w.cfg.MaxHops {
		return fmt.Errorf("%w: the record was dead-lettered by %s already", ErrLoop, strings.Join(path, ", "))
	}
	out := &kgo.Record{
		Topic: l.Topic, Key: r.Key, Value: r.Value,
		// The original timestamp travels along: a redrive delivers it as it was.
		Timestamp: r.Timestamp,
		// The record's own keyhook-* headers are dropped: a producer's would
		// forge this block, a previous hop's would pile up hop after hop.
		Headers: append(original(r),
			kgo.RecordHeader{Key: HeaderSubscription, Value: []byte(l.Subscription)},
			kgo.RecordHeader{Key: HeaderTopic, Value: []byte(r.Topic)},
			kgo.RecordHeader{Key: HeaderPartition, Value: []byte(strconv.FormatInt(int64(r.Partition), 10))},
			kgo.RecordHeader{Key: HeaderOffset, Value: []byte(strconv.FormatInt(r.Offset, 10))},
			kgo.RecordHeader{Key: HeaderDeliveryID, Value: []byte(l.DeliveryID)},
			kgo.RecordHeader{Key: HeaderStatus, Value: []byte(strconv.Itoa(l.Status))},
			kgo.RecordHeader{Key: HeaderError, Value: []byte(l.Error)},
			kgo.RecordHeader{Key: HeaderAttempts, Value: []byte(strconv.Itoa(l.Attempts))},
			kgo.RecordHeader{Key: HeaderFirstAttempt, Value: []byte(formatTime(l.First))},
			kgo.RecordHeader{Key: HeaderLastAttempt, Value: []byte(formatTime(l.Last))},
			kgo.RecordHeader{Key: HeaderPath, Value: []byte(strings.Join(append(path, l.Subscription), ","))},
		),
	}
	log := w.cfg.Logger.With("topic", r.Topic, "partition", r.Partition, "offset", r.Offset,
		"dead_letter_topic", l.Topic, "trace_id", l.TraceID)
	bo := backoff.MustNew(backoff.Config{Initial: 100 * time.Millisecond, Max: 10 * time.Second})
	for {
		err := w.p.ProduceSync(ctx, out).FirstErr()
		if err == nil {
			log.Warn("record dead-lettered", "status", l.Status, "attempts", l.Attempts)
			return nil
		}
		w.cfg.OnError(err)
		if (errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)) && out.Value != nil {
			// The dead-letter topic takes smaller records than the source
			// did: keep the record's place and why it failed, without its
			// value, rather than block the key forever.
			log.Error("record too large for the dead-letter topic; dead-lettering it without its value", "value_bytes", len(r.Value))
			out.Headers = append(out.Headers, kgo.RecordHeader{Key: HeaderValueDropped, Value: []byte(strconv.Itoa(len(r.Value)))})
			out.Value = nil
			continue
		}
		log.Error("dead-letter write failed; retrying", "err", err)
		if err := bo.Wait(ctx, 0); err != nil {
			return fmt.Errorf("deadletter: write to %s: %w", l.Topic, err)
		}
	}
}
