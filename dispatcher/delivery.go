package dispatcher

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/keyhook/keyhook/deadletter"
	"github.com/keyhook/keyhook/delivery"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/webhooks"
)

// DeliveryID names one delivery of one record to one subscription. It is
// the same for every attempt and every redelivery, so endpoints can
// deduplicate.
func DeliveryID(subscription, topic string, partition int32, offset int64) string {
	h := sha256.New()
	h.Write([]byte(subscription))
	h.Write([]byte{0})
	h.Write([]byte(topic))
	h.Write([]byte{0})
	h.Write(strconv.AppendInt(nil, int64(partition), 10))
	h.Write([]byte{0})
	h.Write(strconv.AppendInt(nil, offset, 10))
	return "dlv_" + hex.EncodeToString(h.Sum(nil)[:12])
}

// deliveryLoop is one slot of the subscription's in-flight budget.
func (g *group) deliveryLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-g.jobs:
			g.inFlight.Add(1)
			acked := g.deliver(j.w, j.rec)
			g.inFlight.Add(-1)
			j.w.pushResult(result{rec: j.rec, acked: acked})
		case b := <-g.batches:
			g.inFlight.Add(int64(len(b.recs)))
			g.deliverBatch(b.w, b.recs)
			g.inFlight.Add(-int64(len(b.recs)))
		}
	}
}

// deliver pushes one record until it is acked (delivered or dead-lettered)
// or its partition's deliveries are aborted.
func (g *group) deliver(w *worker, rec *record) bool { return g.deliverFrom(w, rec, nil) }

// deliverFrom is deliver, starting from ended when not nil: the final
// result of a batch that spent its retry budget, which the record takes
// as its own instead of a fresh budget.
func (g *group) deliverFrom(w *worker, rec *record, ended *webhooks.Result) bool {
	id := DeliveryID(g.sub.ID, rec.Payload.Topic, rec.Payload.Partition, rec.Payload.Offset)
	ctx, span := g.startDelivery(w.deliverCtx, rec, id)
	req, reqErr := g.ep.Render(message(g.sub, rec.Payload, id))
	if req != nil {
		// The endpoint continues the delivery's trace (the sender replaces
		// this with its attempt span's context when it traces too).
		g.tel.prop.Inject(ctx, propagation.HeaderCarrier(req.Header))
		if span.IsRecording() {
			req.SpanAttributes = attemptAttrs(g, rec, id)
		}
	}
	retrying := false
	onAttempt := func(a webhooks.Attempt) {
		g.observeAttempt(ctx, span, a)
		if webhooks.Classify(a) == webhooks.OutcomeRetry && !retrying {
			retrying = true
			g.retrying.Add(1)
		}
	}
	defer func() {
		if retrying {
			g.retrying.Add(-1)
		}
	}()
	policy := g.ep.Policy()
	for {
		var res webhooks.Result
		switch {
		case ended != nil:
			res, ended = *ended, nil
		case reqErr != nil:
			now := time.Now()
			res = webhooks.Result{Outcome: webhooks.OutcomeFinal, Err: reqErr, First: now, LastAt: now,
				Last: webhooks.Attempt{Err: reqErr, Started: now}}
		default:
			res = g.n.sender.Deliver(ctx, req, policy, onAttempt)
		}
		switch res.Outcome {
		case webhooks.OutcomeSuccess:
			g.delivered.Add(1)
			g.endDelivery(ctx, span, rec, outcomeDelivered, res)
			return true
		case webhooks.OutcomeFinal:
			dlq := g.sub.DeadLetterTopicFor(rec.Payload.Topic)
			if dlq == "" {
				// Dead-lettering is off: the key blocks and the record is
				// tried again after the longest backoff.
				g.log.Warn("delivery failed and dead-lettering is off; key blocked",
					"topic", rec.Payload.Topic, "partition", rec.Payload.Partition, "offset", rec.Payload.Offset,
					"status", res.Last.Status, "trace_id", traceID(span))
				span.AddEvent("blocked", trace.WithAttributes(attribute.Int("http.response.status_code", res.Last.Status)))
				if !sleepCtx(ctx, policy.MaxInterval) {
					g.endDelivery(ctx, span, rec, outcomeAborted, res)
					return false
				}
				continue
			}
			span.AddEvent("dead_letter", trace.WithAttributes(
				attribute.String("keyhook.dead_letter_topic", dlq),
				attribute.Int("http.response.status_code", res.Last.Status),
				attribute.Int("keyhook.attempts", res.Attempts)))
			err := g.deadLetter(ctx, rec, id, dlq, res, traceID(span))
			switch {
			case errors.Is(err, deadletter.ErrLoop):
				g.endDelivery(ctx, span, rec, outcomeDeadLetterLoop, res)
				return true
			case err != nil:
				g.endDelivery(ctx, span, rec, outcomeAborted, res)
				return false
			}
			g.deadLettered.Add(1)
			g.tel.deadLetters.Add(ctx, 1, metric.WithAttributeSet(g.attrs))
			g.endDelivery(ctx, span, rec, outcomeDeadLettered, res)
			return true
		default:
			g.endDelivery(ctx, span, rec, outcomeAborted, res)
			return false // aborted: shutdown or lost partition
		}
	}
}

// deliverBatch delivers records assembled by one worker in batch requests
// (see subscription.Batch, webhooks.Client.DeliverBatch). Every record
// ends acked or aborted, and a key's records are acked in offset order: a
// record the endpoint reports failed holds back the later records of its
// key, and they go again together, every request counting once against
// the subscription's retry budget. A batch the endpoint refuses for good
// is delivered record by record, so only a bad record is dead-lettered;
// records still failing when the budget is spent are dead-lettered as
// they are, without a fresh budget each.
func (g *group) deliverBatch(w *worker, recs []*record) {
	ctx, span := g.tel.tracer.Start(w.deliverCtx, "process batch "+recs[0].Payload.Topic,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attrSubscription.String(g.sub.ID), attribute.Int("messaging.batch.message_count", len(recs))))
	defer span.End()
	res := g.n.sender.DeliverBatch(ctx, &webhooks.BatchDelivery{
		Messages: batchMessages(g.sub, recs),
		Render: func(ms []*webhooks.Message) (*webhooks.Request, error) {
			req, err := g.ep.RenderBatch(ms)
			if err == nil {
				g.tel.prop.Inject(ctx, propagation.HeaderCarrier(req.Header))
			}
			return req, err
		},
		OnAttempt:   func(a webhooks.Attempt) { g.observeAttempt(ctx, span, a) },
		OnDelivered: func(i int) { g.ackBatched(ctx, w, recs[i]) },
	}, g.ep.Policy())
	pending := make([]*record, len(res.Pending))
	for j, i := range res.Pending {
		pending[j] = recs[i]
	}
	switch {
	case res.Outcome == webhooks.OutcomeSuccess:
	case res.Outcome == webhooks.OutcomeFinal && res.Refused:
		span.AddEvent("batch refused; delivering one by one", trace.WithAttributes(attribute.Int("http.response.status_code", res.Last.Status)))
		g.deliverEach(ctx, w, pending, nil, nil)
	case res.Outcome == webhooks.OutcomeFinal:
		span.AddEvent("retry budget spent", trace.WithAttributes(attribute.Int("keyhook.failed", len(pending)-len(res.Held)), attribute.Int("keyhook.attempts", res.Attempts)))
		held := make(map[*record]bool, len(res.Held))
		for _, i := range res.Held {
			held[recs[i]] = true
		}
		g.deliverEach(ctx, w, pending, &res.Result, held)
	default:
		g.abortAll(w, pending)
	}
}

// batchMessages is recs as webhooks sees a batch: each record's message
// and its ordering group, the key lane it belongs to (none when the
// subscription does not order by key).
func batchMessages(sub *subscription.Subscription, recs []*record) []webhooks.BatchMessage {
	lanes := make(map[string]int64)
	out := make([]webhooks.BatchMessage, len(recs))
	for i, r := range recs {
		group := int64(webhooks.NoGroup)
		if key, ok := r.LaneKey(); ok {
			g, ok := lanes[key]
			if !ok {
				g = int64(len(lanes))
				lanes[key] = g
			}
			group = g
		}
		id := DeliveryID(sub.ID, r.Payload.Topic, r.Payload.Partition, r.Payload.Offset)
		out[i] = webhooks.BatchMessage{Message: message(sub, r.Payload, id), Group: group}
	}
	return out
}

// deliverEach delivers records one at a time in batch order, which keeps
// each key's order; once one is aborted the rest are too. With ended, the
// records start from that final result (a spent batch budget) instead of
// a fresh budget of their own, except the held ones: the endpoint took
// them in the last request, and they waited only for an earlier record of
// their key, settled by now.
func (g *group) deliverEach(ctx context.Context, w *worker, recs []*record, ended *webhooks.Result, held map[*record]bool) {
	for i, r := range recs {
		if held[r] {
			g.ackBatched(ctx, w, r)
			continue
		}
		if !g.deliverFrom(w, r, ended) {
			g.abortAll(w, recs[i:])
			return
		}
		w.pushResult(result{rec: r, acked: true})
	}
}

func (g *group) abortAll(w *worker, recs []*record) {
	for _, r := range recs {
		w.pushResult(result{rec: r})
	}
}

// ackBatched records one record of a batch as delivered.
func (g *group) ackBatched(ctx context.Context, w *worker, r *record) {
	g.delivered.Add(1)
	g.tel.deliveries.Add(ctx, 1, metric.WithAttributeSet(g.outcomeAttrs[outcomeDelivered]))
	if !r.Payload.Timestamp.IsZero() {
		g.tel.endToEnd.Record(ctx, time.Since(r.Payload.Timestamp).Seconds(), metric.WithAttributeSet(g.attrs))
	}
	w.pushResult(result{rec: r, acked: true})
}

// newRequest renders record r as sub's endpoint receives it, signed and
// with its credentials: what a redrive sends.
func newRequest(sub *subscription.Subscription, r *kgo.Record, deliveryID string) (*webhooks.Request, error) {
	return delivery.New(sub, webhooks.RetryPolicy{}).Render(message(sub, r, deliveryID))
}

// message is record r as webhooks sees it: no Kafka, just a message with
// its attributes.
func message(sub *subscription.Subscription, r *kgo.Record, deliveryID string) *webhooks.Message {
	hs := make([]webhooks.Header, len(r.Headers))
	for i, h := range r.Headers {
		hs[i] = webhooks.Header{Name: h.Key, Value: h.Value}
	}
	partition := strconv.FormatInt(int64(r.Partition), 10)
	offset := strconv.FormatInt(r.Offset, 10)
	return &webhooks.Message{
		ID: deliveryID, Key: r.Key, Value: r.Value, Headers: hs, Time: r.Timestamp,
		Source:  "kafka://" + r.Topic,
		Subject: partition + "/" + offset,
		Attributes: []webhooks.Attr{
			{Name: "subscription", Value: sub.ID}, {Name: "topic", Value: r.Topic},
			{Name: "partition", Value: partition}, {Name: "offset", Value: offset},
		},
		ContentType: sub.ContentType,
	}
}

// deadLetterWriter writes a record that failed for good to a dead-letter
// topic; deadletter.Writer implements it. Write returns nil once the dead
// letter is durable, an error wrapping deadletter.ErrLoop for a record that
// must not be dead-lettered again, and another error when ctx ends first.
type deadLetterWriter interface {
	Write(ctx context.Context, l deadletter.Letter) error
}

// groupProducer produces through the group's client of the moment.
type groupProducer struct{ g *group }

func (p groupProducer) ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	return p.g.client().ProduceSync(ctx, rs...)
}

// newDeadLetterWriter builds the group's dead-letter writer, its failed
// writes counted as dead_letter errors.
func (g *group) newDeadLetterWriter() (deadLetterWriter, error) {
	return deadletter.NewWriter(groupProducer{g}, deadletter.WriterConfig{
		Logger:  g.log,
		OnError: func(error) { g.countError("dead_letter") },
	})
}

// deadLetter writes the record to the dead-letter topic with why it
// failed, retrying until the write succeeds or ctx ends (an error): a
// record is acked only once its dead letter is durable. A record that is
// already a dead letter of this subscription, or of too many, is not
// written (an error wrapping deadletter.ErrLoop): it is acked all the
// same, since it still sits in the dead-letter topic it was read from.
func (g *group) deadLetter(ctx context.Context, rec *record, deliveryID, topic string, res webhooks.Result, traceID string) error {
	errText := ""
	switch {
	case res.Err != nil:
		errText = res.Err.Error()
	case res.Last.Err != nil:
		errText = res.Last.Err.Error()
	}
	err := g.dlw.Write(ctx, deadletter.Letter{
		Subscription: g.sub.ID, Record: rec.Payload, Topic: topic, DeliveryID: deliveryID,
		Status: res.Last.Status, Error: errText, Attempts: res.Attempts, First: res.First, Last: res.LastAt,
		TraceID: traceID,
	})
	if errors.Is(err, deadletter.ErrLoop) {
		g.log.Error("record not dead-lettered again: it would loop; acked, it stays in the topic it was read from",
			"topic", rec.Payload.Topic, "partition", rec.Payload.Partition, "offset", rec.Payload.Offset, "dead_letter_topic", topic,
			"status", res.Last.Status, "err", err, "trace_id", traceID)
	}
	return err
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
