package events

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"

	"github.com/keyhook/keyhook/internal/backoff"
	"github.com/keyhook/keyhook/webhooks"
)

// Defaults of Config.
const (
	DefaultQueueSize = 1000
	DefaultTimeout   = 10 * time.Second
	// DefaultMaxBackoff caps the wait between two tries of an event.
	DefaultMaxBackoff = time.Minute
)

// Producer writes records to Kafka; a *kgo.Client implements it.
type Producer interface {
	ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults
}

// Config says where events go. At least one of URL and Topic is needed.
type Config struct {
	// NodeID is the node events come from. Required.
	NodeID string
	// URL, when set, receives each event as a POST of its JSON, signed
	// with Secret the Standard Webhooks way.
	URL string
	// Secret signs the webhooks ("whsec_" and base64); required with URL.
	Secret string
	// Topic, when set, receives each event as a record of Producer,
	// keyed by its subscription (or origin).
	Topic    string
	Producer Producer
	// QueueSize bounds the events waiting; past it the oldest is dropped
	// and counted (keyhook_events_dropped_total). Default 1000.
	QueueSize int
	// Timeout bounds one POST or produce. Default 10s.
	Timeout time.Duration
	// Backoff times the tries of an event that failed; its Max defaults
	// to DefaultMaxBackoff here. An event is tried until it is sent or
	// the Emitter stops; meanwhile newer events queue.
	Backoff backoff.Config
	// Client sends the webhooks. Default: an http.Client without
	// redirects. The URL is the operator's, so no address is refused.
	Client *http.Client
	// Logger receives failures. Default slog.Default().
	Logger *slog.Logger
	// MeterProvider receives the counters. Default no-op.
	MeterProvider metric.MeterProvider
}

// Emitter queues events and sends them, one at a time and in order, from
// the goroutine of Run. A nil *Emitter takes events and drops them, so
// callers need not check whether events are configured.
type Emitter struct {
	cfg    Config
	signer *webhooks.Signer
	log    *slog.Logger

	// mu guards queue, a FIFO bounded by cfg.QueueSize; wake has a token
	// when queue may be non-empty.
	mu    sync.Mutex
	queue []Event
	wake  chan struct{}

	sent, dropped, failures metric.Int64Counter
	sinkHTTP, sinkKafka     metric.MeasurementOption
}

// NewEmitter checks cfg and builds an Emitter; nothing is sent until Run.
func NewEmitter(cfg Config) (*Emitter, error) {
	if cfg.NodeID == "" {
		return nil, errors.New("events: NodeID is required")
	}
	if cfg.URL == "" && cfg.Topic == "" {
		return nil, errors.New("events: URL or Topic is required")
	}
	e := &Emitter{cfg: cfg, wake: make(chan struct{}, 1)}
	if cfg.URL != "" {
		u, err := url.Parse(cfg.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, &FieldError{Field: "URL", Err: errors.New("must be an absolute http or https URL")}
		}
		if cfg.Secret == "" {
			return nil, &FieldError{Field: "Secret", Err: errors.New("is required with URL: events are signed")}
		}
		sec, err := webhooks.ParseSecret(cfg.Secret)
		if err != nil {
			return nil, &FieldError{Field: "Secret", Err: err}
		}
		e.signer = &webhooks.Signer{Secrets: []webhooks.Secret{sec}}
	}
	if cfg.Topic != "" && cfg.Producer == nil {
		return nil, &FieldError{Field: "Producer", Err: errors.New("is required with Topic")}
	}
	if cfg.QueueSize < 0 {
		return nil, &FieldError{Field: "QueueSize", Err: fmt.Errorf("is %d, must not be negative", cfg.QueueSize)}
	}
	if cfg.QueueSize == 0 {
		e.cfg.QueueSize = DefaultQueueSize
	}
	if cfg.Timeout <= 0 {
		e.cfg.Timeout = DefaultTimeout
	}
	if cfg.Backoff.Max == 0 {
		e.cfg.Backoff.Max = DefaultMaxBackoff
	}
	if err := e.cfg.Backoff.Validate(); err != nil {
		return nil, &FieldError{Field: "Backoff", Err: err}
	}
	if cfg.Client == nil {
		e.cfg.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	e.log = cfg.Logger
	if e.log == nil {
		e.log = slog.Default()
	}
	mp := cfg.MeterProvider
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	m := mp.Meter("github.com/keyhook/keyhook/events")
	var err error
	if e.sent, err = m.Int64Counter("keyhook.events.sent", metric.WithDescription("Operational events sent, by sink (webhook, kafka)."), metric.WithUnit("{event}")); err != nil {
		return nil, err
	}
	if e.dropped, err = m.Int64Counter("keyhook.events.dropped", metric.WithDescription("Operational events dropped unsent: the oldest waiting, when the queue was full (the operator's endpoint or topic failing for long), or those waiting when the node stopped."), metric.WithUnit("{event}")); err != nil {
		return nil, err
	}
	if e.failures, err = m.Int64Counter("keyhook.events.failures", metric.WithDescription("Failed tries to send an operational event, by sink; each is tried again with backoff."), metric.WithUnit("{attempt}")); err != nil {
		return nil, err
	}
	e.sinkHTTP = metric.WithAttributes(attribute.String("keyhook.sink", "webhook"))
	e.sinkKafka = metric.WithAttributes(attribute.String("keyhook.sink", "kafka"))
	return e, nil
}

// FieldError is a Config field the Emitter cannot work with.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return "events: " + e.Field + " " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// Emit queues ev and returns at once; its id, source, node and time are
// filled when empty. With the queue full, the oldest waiting event is
// dropped and counted.
func (e *Emitter) Emit(ev Event) {
	if e == nil {
		return
	}
	if ev.ID == "" {
		ev.ID = newID()
	}
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	ev.SpecVersion, ev.Node, ev.Source, ev.DataContentType = SpecVersion, e.cfg.NodeID, "keyhook://"+e.cfg.NodeID, "application/json"
	if ev.Data == nil {
		ev.Data = json.RawMessage("{}")
	}
	e.mu.Lock()
	if len(e.queue) >= e.cfg.QueueSize {
		e.queue[0] = Event{}
		e.queue = e.queue[1:]
		e.dropped.Add(context.Background(), 1)
	}
	e.queue = append(e.queue, ev)
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// pop takes the oldest queued event.
func (e *Emitter) pop() (Event, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.queue) == 0 {
		return Event{}, false
	}
	ev := e.queue[0]
	e.queue[0] = Event{}
	e.queue = e.queue[1:]
	return ev, true
}

// Run sends queued events until ctx ends; events still queued then are
// dropped and counted. It returns nil.
func (e *Emitter) Run(ctx context.Context) error {
	bo, err := backoff.New(e.cfg.Backoff)
	if err != nil {
		return fmt.Errorf("events: %w", err)
	}
	for {
		ev, ok := e.pop()
		if !ok {
			select {
			case <-ctx.Done():
				return nil
			case <-e.wake:
				continue
			}
		}
		if !e.send(ctx, ev, bo) {
			e.mu.Lock()
			n := len(e.queue) + 1
			e.queue = nil
			e.mu.Unlock()
			e.dropped.Add(context.Background(), int64(n))
			if n > 0 {
				e.log.Warn("operational events dropped unsent at stop", "events", n)
			}
			return nil
		}
	}
}

// send delivers ev to every sink, each until it takes it; false when ctx
// ended first.
func (e *Emitter) send(ctx context.Context, ev Event, bo *backoff.Backoff) bool {
	body, err := json.Marshal(ev)
	if err != nil {
		e.log.Error("operational event not encoded; dropped", "type", ev.Type, "err", err)
		return true
	}
	needHTTP, needKafka := e.cfg.URL != "", e.cfg.Topic != ""
	bo.Reset()
	for {
		if needHTTP {
			if err := e.post(ctx, ev, body); err != nil {
				e.failures.Add(ctx, 1, e.sinkHTTP)
				e.log.Warn("operational event not taken by the events endpoint; tried again", "type", ev.Type, "id", ev.ID, "err", err)
			} else {
				needHTTP = false
				e.sent.Add(ctx, 1, e.sinkHTTP)
			}
		}
		if needKafka {
			if err := e.produce(ctx, ev, body); err != nil {
				e.failures.Add(ctx, 1, e.sinkKafka)
				e.log.Warn("operational event not written to the events topic; tried again", "type", ev.Type, "id", ev.ID, "err", err)
			} else {
				needKafka = false
				e.sent.Add(ctx, 1, e.sinkKafka)
			}
		}
		if !needHTTP && !needKafka {
			return true
		}
		if bo.Wait(ctx, 0) != nil {
			return false
		}
	}
}

// post sends ev's JSON to the URL, signed afresh (the timestamp is part
// of the signature).
func (e *Emitter) post(ctx context.Context, ev Event, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "keyhook-events")
	e.signer.Sign(ev.ID, time.Now(), body, req.Header)
	resp, err := e.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("answered %d", resp.StatusCode)
	}
	return nil
}

// produce writes ev to the topic, keyed by what it is about, so one
// subscription's (or origin's) events stay in order in one partition.
func (e *Emitter) produce(ctx context.Context, ev Event, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	key := ev.Subscription
	if key == "" {
		var o struct {
			Origin string `json:"origin"`
		}
		_ = json.Unmarshal(ev.Data, &o)
		key = o.Origin
	}
	rec := &kgo.Record{Topic: e.cfg.Topic, Key: []byte(key), Value: body, Headers: []kgo.RecordHeader{
		{Key: "content-type", Value: []byte("application/cloudevents+json")},
		{Key: "ce_type", Value: []byte(ev.Type)},
		{Key: "ce_id", Value: []byte(ev.ID)},
	}}
	return e.cfg.Producer.ProduceSync(ctx, rec).FirstErr()
}
