package dispatcher

import (
	"context"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/keyhook/keyhook/webhooks"
)

const instrumentation = "github.com/keyhook/keyhook/dispatcher"

// Attribute keys of keyhook's own metrics. Label cardinality stays bounded:
// subscription, topic, partition, outcome and status class only — never a
// key or an offset.
var (
	attrSubscription = attribute.Key("keyhook.subscription")
	attrOutcome      = attribute.Key("keyhook.outcome")
	attrStatusClass  = attribute.Key("http.response.status_class")
	attrOp           = attribute.Key("keyhook.operation")
	attrKind         = attribute.Key("keyhook.rebalance")
	attrReason       = attribute.Key("keyhook.reason")
	attrTopic        = semconv.MessagingDestinationNameKey
	attrPartition    = semconv.MessagingDestinationPartitionIDKey
	// attrOrigin is an endpoint origin, scheme://host:port: bounded by
	// the subscriptions' endpoints.
	attrOrigin = attribute.Key("keyhook.origin")
	attrState  = attribute.Key("keyhook.breaker.state")
)

// telemetry holds a node's instruments. Built from the injected providers;
// with the default no-op providers every call costs next to nothing.
type telemetry struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	// noSpans is set when the tracer provider is the no-op one: a
	// delivery then opens no span.
	noSpans bool

	fetched      metric.Int64Counter
	deliveries   metric.Int64Counter
	attempts     metric.Int64Counter
	deadLetters  metric.Int64Counter
	deliveryTime metric.Float64Histogram
	attemptTime  metric.Float64Histogram
	endToEnd     metric.Float64Histogram
	flushTime    metric.Float64Histogram
	commitTime   metric.Float64Histogram
	errors       metric.Int64Counter
	rebalances   metric.Int64Counter
	startResets  metric.Int64Counter
	notOwned     metric.Int64Counter
	reread       metric.Int64Counter
	readerFetch  metric.Int64Counter
	detached     metric.Int64Counter
	caughtUp     metric.Int64Counter
	expiring     metric.Int64Counter
	superseded   metric.Int64Counter
	filtered     metric.Int64Counter
	lost         metric.Int64Counter
	// breakerTransitions counts circuit breaker transitions by origin and
	// the state entered.
	breakerTransitions metric.Int64Counter
}

func newTelemetry(n *Node) (*telemetry, error) {
	m := n.cfg.MeterProvider.Meter(instrumentation)
	t := &telemetry{
		tracer: n.cfg.TracerProvider.Tracer(instrumentation),
		prop:   n.cfg.Propagator,
	}
	_, t.noSpans = n.cfg.TracerProvider.(tracenoop.TracerProvider)
	var err error
	seconds := metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
	must := func(e error) {
		if err == nil && e != nil {
			err = e
		}
	}
	var e error
	t.fetched, e = m.Int64Counter("keyhook.records.fetched", metric.WithDescription("Records read from Kafka."), metric.WithUnit("{record}"))
	must(e)
	t.notOwned, e = m.Int64Counter("keyhook.records.not_owned", metric.WithDescription("Records read from a shared partition that another node delivers (their key hash is in its range): the read amplification of key-range sharing."), metric.WithUnit("{record}"))
	must(e)
	t.reread, e = m.Int64Counter("keyhook.records.reread", metric.WithDescription("Records fetched again from Kafka to take back parked ones (a key that held more than --park-after records parks the rest by offset); a pass reads every record from the lowest parked offset wanted, so this counts the read cost of stuck or slow keys, not the parked records."), metric.WithUnit("{record}"))
	must(e)
	t.readerFetch, e = m.Int64Counter("keyhook.reader.records.fetched", metric.WithDescription("Records a node's shared reader fetched from Kafka (--shared-read), by reader group: each is offered to every subscription reading its topics, so keyhook.records.fetched over this is the read shared."), metric.WithUnit("{record}"))
	must(e)
	t.detached, e = m.Int64Counter("keyhook.cursor.detaches", metric.WithDescription("Times a subscription's partition left the node's shared read (--shared-read) to catch up on a read of its own: its window was full, or it started behind the reader."), metric.WithUnit("{detach}"))
	must(e)
	t.caughtUp, e = m.Int64Counter("keyhook.records.caught_up", metric.WithDescription("Records a detached subscription partition read on its own catch-up to rejoin the shared read (--shared-read): the read cost of lagging subscriptions."), metric.WithUnit("{record}"))
	must(e)
	t.expiring, e = m.Int64Counter("keyhook.records.expiring", metric.WithDescription("Pending records found about to be deleted by the topic's retention (a quarter of retention.ms before, at most 6 h) and let out of their key's turn: dead-lettered with the reason, or delivered at once when dead-lettering is off."), metric.WithUnit("{record}"))
	must(e)
	t.superseded, e = m.Int64Counter("keyhook.records.superseded", metric.WithDescription("Records of a conflating subscription acked without delivery: a newer record of their key arrived while they waited."), metric.WithUnit("{record}"))
	must(e)
	t.filtered, e = m.Int64Counter("keyhook.records.filtered", metric.WithDescription("Records the subscription's filter rejected: acked without delivery. Counted when evaluated, so a record read again (a takeover, a re-read pass) counts again."), metric.WithUnit("{record}"))
	must(e)
	t.lost, e = m.Int64Counter("keyhook.records.lost", metric.WithDescription("Records never delivered, by reason: retention (parked records the log start passed before they could be read again). Any increase is an incident."), metric.WithUnit("{record}"))
	must(e)
	t.deliveries, e = m.Int64Counter("keyhook.deliveries", metric.WithDescription("Deliveries that ended, by outcome: delivered, dead_lettered, aborted."), metric.WithUnit("{delivery}"))
	must(e)
	t.attempts, e = m.Int64Counter("keyhook.delivery.attempts", metric.WithDescription("HTTP attempts, by status class (2xx…5xx, error)."), metric.WithUnit("{attempt}"))
	must(e)
	t.deadLetters, e = m.Int64Counter("keyhook.dead_letters", metric.WithDescription("Records written to a dead-letter topic."), metric.WithUnit("{record}"))
	must(e)
	t.deliveryTime, e = m.Float64Histogram("keyhook.delivery.duration", metric.WithDescription("From the first attempt to the final outcome."), metric.WithUnit("s"), seconds)
	must(e)
	t.attemptTime, e = m.Float64Histogram("keyhook.attempt.duration", metric.WithDescription("One HTTP attempt."), metric.WithUnit("s"), seconds)
	must(e)
	t.endToEnd, e = m.Float64Histogram("keyhook.end_to_end.latency", metric.WithDescription("From the record's timestamp to its ack."), metric.WithUnit("s"), seconds)
	must(e)
	t.flushTime, e = m.Float64Histogram("keyhook.tracking.flush.duration", metric.WithDescription("One pipelined call of a round writing the tracking state of a node's partitions to Redis (up to 256 partitions, of any subscriptions): the node's, without a subscription label."), metric.WithUnit("s"), seconds)
	must(e)
	t.commitTime, e = m.Float64Histogram("keyhook.kafka.commit.duration", metric.WithDescription("One offset commit to Kafka."), metric.WithUnit("s"), seconds)
	must(e)
	t.errors, e = m.Int64Counter("keyhook.errors", metric.WithDescription("Failed Redis and Kafka operations, by operation: flush, claim, load, commit, fetch, dead_letter."), metric.WithUnit("{error}"))
	must(e)
	t.rebalances, e = m.Int64Counter("keyhook.rebalances", metric.WithDescription("Partitions assigned, revoked or lost."), metric.WithUnit("{partition}"))
	must(e)
	t.startResets, e = m.Int64Counter("keyhook.partition.start_reset", metric.WithDescription("Assigned partitions that did not start at the group's commit, by reason: "+
		"offsets_expired (no commit; resumed at the tracked watermark), topic_recreated (the commit is a deleted topic's of the same name; "+
		"started at the log start), out_of_range (commit or tracked watermark outside the log; started at the log start), "+
		"stale_tracking (the claim dropped acked ranges of a deleted topic of the same name)."), metric.WithUnit("{partition}"))
	must(e)

	t.breakerTransitions, e = m.Int64Counter("keyhook.breaker.transitions", metric.WithDescription("Circuit breaker transitions of this node, by endpoint origin and the state entered: open, half-open, closed."), metric.WithUnit("{transition}"))
	must(e)
	_, e = m.Int64ObservableGauge("keyhook.breaker.state", metric.WithDescription("Each endpoint origin's circuit breaker on this node: 0 closed, 1 half-open (one probe at a time), 2 open (no requests; its deliveries wait without spending attempts). Absent with --breaker-failures 0."), metric.WithUnit("{state}"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			for origin, st := range n.breakers.States() {
				o.Observe(int64(st), metric.WithAttributes(attrOrigin.String(origin)))
			}
			return nil
		}))
	must(e)
	_, e = m.Int64ObservableGauge("keyhook.in_flight", metric.WithDescription("Delivery attempts in flight on this node (a batch request is one); max_in_flight bounds them."), metric.WithUnit("{attempt}"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			for _, g := range n.groups() {
				o.Observe(g.inFlight.Load(), metric.WithAttributeSet(g.attrs))
			}
			return nil
		}))
	must(e)
	_, e = m.Int64ObservableGauge("keyhook.retrying", metric.WithDescription("Deliveries waiting for their next attempt on this node (a retry, their rate limit's turn, their endpoint's open circuit breaker); they hold no delivery slot."), metric.WithUnit("{delivery}"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			for _, g := range n.groups() {
				o.Observe(g.retrying.Load(), metric.WithAttributeSet(g.attrs))
			}
			return nil
		}))
	must(e)
	_, e = m.Int64ObservableGauge("keyhook.partitions.owned", metric.WithDescription("Partitions this node owns, per subscription."), metric.WithUnit("{partition}"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			for _, g := range n.groups() {
				o.Observe(int64(len(g.snapshotWorkers())), metric.WithAttributeSet(g.attrs))
			}
			return nil
		}))
	must(e)
	_, e = m.Int64ObservableGauge("keyhook.partitions.total", metric.WithDescription("Partitions of the subscription's topics, as last read from Kafka; more than the sum of owned partitions over all nodes means some have no owner."), metric.WithUnit("{partition}"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			for _, g := range n.groups() {
				if total := g.topicPartitions.Load(); total > 0 {
					o.Observe(total, metric.WithAttributeSet(g.attrs))
				}
			}
			return nil
		}))
	must(e)
	partitionGauge := func(name, desc, unit string, value func(*worker) (int64, bool)) {
		_, e := m.Int64ObservableGauge(name, metric.WithDescription(desc), metric.WithUnit(unit),
			metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
				for _, g := range n.groups() {
					for _, w := range g.snapshotWorkers() {
						if v, ok := value(w); ok {
							o.Observe(v, metric.WithAttributeSet(w.attrs))
						}
					}
				}
				return nil
			}))
		must(e)
	}
	_, e = m.Int64ObservableGauge("keyhook.buffered.bytes", metric.WithDescription("Bytes of fetched records this node holds until they are acked, over every partition; fetching pauses at --max-buffered-bytes."), metric.WithUnit("By"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(n.budget.Used())
			return nil
		}))
	must(e)
	_, e = m.Float64ObservableGauge("keyhook.commit.interval", metric.WithDescription("How often each subscription's group commits from this node: --commit-interval, or subscriptions ÷ --commit-rate seconds when the node runs more subscriptions than the rate allows in an interval."), metric.WithUnit("s"),
		metric.WithFloat64Callback(func(_ context.Context, o metric.Float64Observer) error {
			o.Observe(n.loops.commitPeriod().Seconds())
			return nil
		}))
	must(e)
	_, e = m.Int64ObservableGauge("keyhook.partitions.unclaimed", metric.WithDescription("Partitions assigned to this node whose claim in the tracker is refused or failing (or fenced): nothing of them is delivered."), metric.WithUnit("{partition}"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			for _, g := range n.groups() {
				var unclaimed int64
				for _, w := range g.snapshotWorkers() {
					if !w.pub.claimed.Load() || w.pub.fenced.Load() {
						unclaimed++
					}
				}
				o.Observe(unclaimed, metric.WithAttributeSet(g.attrs))
			}
			return nil
		}))
	must(e)
	_, e = m.Int64ObservableGauge("keyhook.partitions.unconfirmed", metric.WithDescription("Partitions claimed by this node whose ownership is not confirmed: the tracker has not confirmed the claim (Redis unreachable, or the node was frozen), or the group coordinator has not answered the node (Kafka unreachable), for the session timeout less a heartbeat, so no delivery of them starts until both confirm it or one refuses it."), metric.WithUnit("{partition}"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			for _, g := range n.groups() {
				var unconfirmed int64
				for _, w := range g.snapshotWorkers() {
					if w.pub.claimed.Load() && !w.pub.fenced.Load() && !w.owned() {
						unconfirmed++
					}
				}
				o.Observe(unconfirmed, metric.WithAttributeSet(g.attrs))
			}
			return nil
		}))
	must(e)
	partitionGauge("keyhook.partition.paused", "1 while fetching the partition is paused (window full or not yet claimed).", "",
		func(w *worker) (int64, bool) {
			if w.pub.paused.Load() {
				return 1, true
			}
			return 0, true
		})
	partitionGauge("keyhook.consumer.lag", "High watermark minus the committed offset.", "{record}",
		func(w *worker) (int64, bool) {
			hw, c := w.highWatermark.Load(), w.committed.Load()
			if hw < 0 || c < 0 {
				return 0, false
			}
			return max(0, hw-c), true
		})
	partitionGauge("keyhook.cursor.catchup.lag", "Records a subscription partition that left the node's shared read (--shared-read) has yet to read to rejoin it: the reader's position minus the cursor's; no value while the cursor is on the shared read.", "{record}",
		func(w *worker) (int64, bool) {
			if !w.cursor() || !w.pub.detached.Load() {
				return 0, false
			}
			pos, next := w.g.rd.position(w.tp), w.pub.next.Load()
			if pos < 0 || next < 0 {
				return 0, false
			}
			return max(0, pos-next), true
		})
	partitionGauge("keyhook.watermark.distance", "Fetch position minus watermark: the partition's window in use.", "{record}",
		func(w *worker) (int64, bool) {
			next, wm := w.pub.next.Load(), w.pub.watermark.Load()
			if next < 0 || wm < 0 {
				return 0, false
			}
			return max(0, next-wm), true
		})
	partitionGauge("keyhook.pending", "Fetched records not yet acked.", "{record}",
		func(w *worker) (int64, bool) { return w.pub.pending.Load(), true })
	_, e = m.Float64ObservableGauge("keyhook.watermark.age", metric.WithDescription("How long the record holding the partition's watermark (the next offset to commit) has been pending since it was read; it grows while a record retries or a key is slower than its arrivals. The subscription status names the record."), metric.WithUnit("s"),
		metric.WithFloat64Callback(func(_ context.Context, o metric.Float64Observer) error {
			now := time.Now().UnixNano()
			for _, g := range n.groups() {
				for _, w := range g.snapshotWorkers() {
					if since := w.pub.holdingSince.Load(); since > 0 {
						o.Observe(max(0, float64(now-since)/1e9), metric.WithAttributeSet(w.attrs))
					} else if w.pub.claimed.Load() {
						o.Observe(0, metric.WithAttributeSet(w.attrs))
					}
				}
			}
			return nil
		}))
	must(e)
	partitionGauge("keyhook.records.parked", "Pending records of the partition held by offset only, their values dropped until their key has room: keys stuck or slower than their arrivals. Fetching goes on for the other keys.", "{record}",
		func(w *worker) (int64, bool) { return w.pub.parked.Load(), true })
	_, e = m.Float64ObservableGauge("keyhook.retention.headroom", metric.WithDescription("How long until the retention guard lets the partition's oldest pending record (with none, one read now) out of its key's turn (dead-lettered, or delivered when dead-lettering is off): a quarter of the topic's retention.ms (at most 6 h) before the record may be deleted. Absent for topics without time-based retention."), metric.WithUnit("s"),
		metric.WithFloat64Callback(func(_ context.Context, o metric.Float64Observer) error {
			now := time.Now().UnixNano()
			for _, g := range n.groups() {
				for _, w := range g.snapshotWorkers() {
					if at := w.pub.guardAt.Load(); at > 0 {
						o.Observe(float64(at-now)/1e9, metric.WithAttributeSet(w.attrs))
					}
				}
			}
			return nil
		}))
	must(e)
	partitionGauge("keyhook.partition.key_hashes", "Key hashes of the partition (of 65536) this node delivers: all of them unless the partition is shared by key range.", "{hash}",
		func(w *worker) (int64, bool) { return int64(w.ranges().Len()), true })
	return t, err
}

// initTelemetry builds the group's attribute sets once, so recording on
// the hot path allocates none.
func (g *group) initTelemetry() {
	id := g.sub.ID
	g.tel = g.n.tel
	g.attrs = attribute.NewSet(attrSubscription.String(id))
	g.classAttrs = make(map[string]attribute.Set, len(statusClasses))
	for _, c := range statusClasses {
		g.classAttrs[c] = attribute.NewSet(attrSubscription.String(id), attrStatusClass.String(c))
	}
	g.outcomeAttrs = make(map[string]attribute.Set, 4)
	ctx := context.Background()
	for _, o := range []string{outcomeDelivered, outcomeDeadLettered, outcomeAborted, outcomeDeadLetterLoop} {
		g.outcomeAttrs[o] = attribute.NewSet(attrSubscription.String(id), attrOutcome.String(o))
		g.tel.deliveries.Add(ctx, 0, metric.WithAttributeSet(g.outcomeAttrs[o]))
	}
	g.opts = newDeliveryOpts(g)
	// Series that alerts watch exist from the start, at zero, so increase()
	// and rate() see the first event instead of a series appearing.
	g.tel.deadLetters.Add(ctx, 0, metric.WithAttributeSet(g.attrs))
	g.tel.lost.Add(ctx, 0, metric.WithAttributes(attrSubscription.String(id), attrReason.String(lostRetention)))
	for _, op := range []string{"fetch", "claim", "flush", "commit", "dead_letter", "reread"} {
		g.tel.errors.Add(ctx, 0, metric.WithAttributes(attrSubscription.String(id), attrOp.String(op)))
	}
}

// deliveryOpts are the options of a group's per-delivery measurements,
// built once: an option, and the variadic slice passing it, built per
// call cost an allocation each on every delivery.
type deliveryOpts struct {
	subAdd    []metric.AddOption
	subRecord []metric.RecordOption
	// By status class and by outcome.
	classAdd      map[string][]metric.AddOption
	classRecord   map[string][]metric.RecordOption
	outcomeAdd    map[string][]metric.AddOption
	outcomeRecord map[string][]metric.RecordOption
	// By topic of the subscription: the delivery span's name and the
	// message's source.
	spanNames, sources map[string]string
}

// spanName is the name of the delivery span of a record of topic.
func (o *deliveryOpts) spanName(topic string) string {
	if n, ok := o.spanNames[topic]; ok {
		return n
	}
	return "process " + topic
}

// source is the message source of a record of topic.
func (o *deliveryOpts) source(topic string) string {
	if n, ok := o.sources[topic]; ok {
		return n
	}
	return "kafka://" + topic
}

func newDeliveryOpts(g *group) deliveryOpts {
	o := deliveryOpts{
		subAdd:        []metric.AddOption{metric.WithAttributeSet(g.attrs)},
		subRecord:     []metric.RecordOption{metric.WithAttributeSet(g.attrs)},
		classAdd:      make(map[string][]metric.AddOption, len(g.classAttrs)),
		classRecord:   make(map[string][]metric.RecordOption, len(g.classAttrs)),
		outcomeAdd:    make(map[string][]metric.AddOption, len(g.outcomeAttrs)),
		outcomeRecord: make(map[string][]metric.RecordOption, len(g.outcomeAttrs)),
		spanNames:     make(map[string]string, len(g.sub.Topics)),
		sources:       make(map[string]string, len(g.sub.Topics)),
	}
	for _, t := range g.sub.Topics {
		o.spanNames[t] = "process " + t
		o.sources[t] = "kafka://" + t
	}
	for c, set := range g.classAttrs {
		o.classAdd[c] = []metric.AddOption{metric.WithAttributeSet(set)}
		o.classRecord[c] = []metric.RecordOption{metric.WithAttributeSet(set)}
	}
	for c, set := range g.outcomeAttrs {
		o.outcomeAdd[c] = []metric.AddOption{metric.WithAttributeSet(set)}
		o.outcomeRecord[c] = []metric.RecordOption{metric.WithAttributeSet(set)}
	}
	return o
}

func partitionAttrs(subID string, tp topicPartition) attribute.Set {
	return attribute.NewSet(attrSubscription.String(subID), attrTopic.String(tp.topic),
		attrPartition.String(strconv.FormatInt(int64(tp.partition), 10)))
}

func (g *group) countError(op string) {
	g.tel.errors.Add(context.Background(), 1, metric.WithAttributes(attrSubscription.String(g.sub.ID), attrOp.String(op)))
}

// Reasons of keyhook.partition.start_reset.
const (
	resetOffsetsExpired = "offsets_expired"
	resetTopicRecreated = "topic_recreated"
	resetOutOfRange     = "out_of_range"
	resetStaleTracking  = "stale_tracking"
)

func (g *group) countStartReset(tp topicPartition, reason string) {
	g.tel.startResets.Add(context.Background(), 1, metric.WithAttributes(attrSubscription.String(g.sub.ID),
		attrTopic.String(tp.topic), attrPartition.String(strconv.FormatInt(int64(tp.partition), 10)), attrReason.String(reason)))
}

func (g *group) countRebalance(kind string, ps map[string][]int32) {
	n := 0
	for _, p := range ps {
		n += len(p)
	}
	if n > 0 {
		g.tel.rebalances.Add(context.Background(), int64(n), metric.WithAttributes(attrSubscription.String(g.sub.ID), attrKind.String(kind)))
	}
}

// recordCarrier reads W3C trace context from a record's headers.
type recordCarrier struct{ r *kgo.Record }

func (c recordCarrier) Get(key string) string {
	for _, h := range c.r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func (c recordCarrier) Set(string, string) {} // records are never written back

func (c recordCarrier) Keys() []string {
	out := make([]string, len(c.r.Headers))
	for i, h := range c.r.Headers {
		out[i] = h.Key
	}
	return out
}

// consumerSpan starts a delivery span; built once, as a per-call option
// would cost an allocation on every record.
var consumerSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}

// startDelivery opens the span of one delivery: a child of the producer's
// span when the record carries trace context, a root otherwise.
func (g *group) startDelivery(ctx context.Context, r *kgo.Record, deliveryID string) (context.Context, trace.Span) {
	ctx = g.tel.prop.Extract(ctx, recordCarrier{r})
	if g.tel.noSpans {
		// The record's trace context travels on as it is, as a span that
		// records nothing would carry it, without the context such a span
		// costs on every record.
		return ctx, trace.SpanFromContext(ctx)
	}
	ctx, span := g.tel.tracer.Start(ctx, g.opts.spanName(r.Topic), consumerSpan...)
	// Attributes cost allocations on every record; only a recorded span
	// gets them, so tracing off stays nearly free.
	if !span.IsRecording() {
		return ctx, span
	}
	span.SetAttributes(
		semconv.MessagingSystemKafka,
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingDestinationName(r.Topic),
		semconv.MessagingDestinationPartitionID(strconv.FormatInt(int64(r.Partition), 10)),
		semconv.MessagingKafkaOffset(int(r.Offset)),
		semconv.MessagingConsumerGroupName(g.sub.GroupID()),
		semconv.MessagingMessageID(deliveryID),
		attrSubscription.String(g.sub.ID),
	)
	if r.Key != nil && utf8.Valid(r.Key) {
		span.SetAttributes(semconv.MessagingKafkaMessageKey(string(r.Key)))
	}
	return ctx, span
}

// attemptAttrs are the messaging attributes each attempt span carries.
func attemptAttrs(g *group, r *kgo.Record, deliveryID string) []attribute.KeyValue {
	return []attribute.KeyValue{
		semconv.MessagingSystemKafka,
		semconv.MessagingDestinationName(r.Topic),
		semconv.MessagingDestinationPartitionID(strconv.FormatInt(int64(r.Partition), 10)),
		semconv.MessagingKafkaOffset(int(r.Offset)),
		semconv.MessagingConsumerGroupName(g.sub.GroupID()),
		semconv.MessagingMessageID(deliveryID),
	}
}

// observeAttempt records one attempt in metrics and, when it will be
// retried, as an event on the delivery span.
func (g *group) observeAttempt(ctx context.Context, span trace.Span, a webhooks.Attempt) {
	class := statusClass(a)
	g.tel.attempts.Add(ctx, 1, g.opts.classAdd[class]...)
	g.tel.attemptTime.Record(ctx, a.Duration.Seconds(), g.opts.classRecord[class]...)
	if webhooks.Classify(a) == webhooks.OutcomeRetry && span.IsRecording() {
		ev := []attribute.KeyValue{attribute.Int("keyhook.attempt", a.Number), attribute.Int("http.response.status_code", a.Status)}
		if a.RetryAfter > 0 {
			ev = append(ev, attribute.Float64("keyhook.retry_after_s", a.RetryAfter.Seconds()))
		}
		if a.Err != nil {
			ev = append(ev, attribute.String("error.message", a.Err.Error()))
		}
		span.AddEvent("retry", trace.WithAttributes(ev...))
	}
}

// endDelivery records the outcome of a delivery and ends its span.
func (g *group) endDelivery(ctx context.Context, span trace.Span, rec *kgo.Record, outcome string, res webhooks.Result) {
	g.tel.deliveries.Add(ctx, 1, g.opts.outcomeAdd[outcome]...)
	if !res.First.IsZero() {
		g.tel.deliveryTime.Record(ctx, res.LastAt.Sub(res.First).Seconds(), g.opts.outcomeRecord[outcome]...)
	}
	if outcome != outcomeAborted && !rec.Timestamp.IsZero() {
		g.tel.endToEnd.Record(ctx, time.Since(rec.Timestamp).Seconds(), g.opts.subRecord...)
	}
	if !span.IsRecording() {
		span.End()
		return
	}
	span.SetAttributes(attrOutcome.String(outcome), attribute.Int("keyhook.attempts", res.Attempts))
	switch outcome {
	case outcomeDeadLettered:
		span.SetStatus(codes.Error, fmt.Sprintf("dead-lettered after %d attempts, last status %d", res.Attempts, res.Last.Status))
	case outcomeAborted:
		span.SetStatus(codes.Error, "aborted: partition released before the delivery finished")
	case outcomeDeadLetterLoop:
		span.SetStatus(codes.Error, fmt.Sprintf("not dead-lettered again (loop) after %d attempts, last status %d", res.Attempts, res.Last.Status))
	}
	span.End()
}

const (
	outcomeDelivered    = "delivered"
	outcomeDeadLettered = "dead_lettered"
	outcomeAborted      = "aborted"
	// outcomeDeadLetterLoop acks a record that failed and is a dead letter
	// of this subscription already (or of too many): writing it again
	// would feed a loop between dead-letter topics.
	outcomeDeadLetterLoop = "dead_letter_loop"
)

var statusClasses = []string{"1xx", "2xx", "3xx", "4xx", "5xx", "error"}

func statusClass(a webhooks.Attempt) string {
	if a.Status < 100 || a.Status > 599 {
		return "error"
	}
	return statusClasses[a.Status/100-1]
}

// traceID returns the span's trace id for logs, or "".
func traceID(span trace.Span) string {
	if sc := span.SpanContext(); sc.HasTraceID() {
		return sc.TraceID().String()
	}
	return ""
}
