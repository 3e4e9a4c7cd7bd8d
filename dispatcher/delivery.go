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
		case rec := <-g.jobs:
			g.inFlight.Add(1)
			acked := g.deliver(rec)
			g.inFlight.Add(-1)
			rec.w.pushResult(result{rec: rec, acked: acked})
		case recs := <-g.batches:
			g.inFlight.Add(int64(len(recs)))
			g.deliverBatch(recs)
			g.inFlight.Add(-int64(len(recs)))
		}
	}
}

// deliver pushes one record until it is acked (delivered or dead-lettered)
// or its partition's deliveries are aborted.
func (g *group) deliver(rec *record) bool {
	id := DeliveryID(g.sub.ID, rec.r.Topic, rec.r.Partition, rec.r.Offset)
	ctx, span := g.startDelivery(rec.w.deliverCtx, rec, id)
	req, reqErr := g.request(rec, id)
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
	for {
		var res webhooks.Result
		if reqErr != nil {
			now := time.Now()
			res = webhooks.Result{Outcome: webhooks.OutcomeFinal, Err: reqErr, First: now, LastAt: now,
				Last: webhooks.Attempt{Err: reqErr, Started: now}}
		} else {
			res = g.n.sender.Deliver(ctx, req, g.policy, onAttempt)
		}
		switch res.Outcome {
		case webhooks.OutcomeSuccess:
			g.delivered.Add(1)
			g.endDelivery(ctx, span, rec, outcomeDelivered, res)
			return true
		case webhooks.OutcomeFinal:
			dlq := g.sub.DeadLetterTopicFor(rec.r.Topic)
			if dlq == "" {
				// Dead-lettering is off: the key blocks and the record is
				// tried again after the longest backoff.
				g.log.Warn("delivery failed and dead-lettering is off; key blocked",
					"topic", rec.r.Topic, "partition", rec.r.Partition, "offset", rec.r.Offset,
					"status", res.Last.Status, "trace_id", traceID(span))
				span.AddEvent("blocked", trace.WithAttributes(attribute.Int("http.response.status_code", res.Last.Status)))
				if !sleepCtx(ctx, g.policy.MaxInterval) {
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

// request builds the delivery of one record in the subscription's format.
// A record that cannot be put in that format (say, a header that no HTTP
// request can carry in CloudEvents binary mode) is an error: final, the
// record is dead-lettered.
// deliverBatch delivers records assembled by one worker in one request
// (see subscription.Batch). Every record ends acked or aborted, and a
// key's records are acked in offset order: a record the endpoint reports
// failed holds back the later records of its key in the batch, and they go
// again together. A batch the endpoint refuses for good, or one whose
// retry budget is spent, is delivered record by record, so only a bad
// record is dead-lettered.
func (g *group) deliverBatch(recs []*record) {
	w := recs[0].w
	ctx, span := g.tel.tracer.Start(w.deliverCtx, "process batch "+recs[0].r.Topic,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attrSubscription.String(g.sub.ID), attribute.Int("messaging.batch.message_count", len(recs))))
	defer span.End()
	policy := g.policy
	wait := policy.InitialInterval
	started := time.Now()
	for round := 1; ; round++ {
		msgs := make([]*webhooks.Message, len(recs))
		ids := make([]string, len(recs))
		for i, r := range recs {
			ids[i] = DeliveryID(g.sub.ID, r.r.Topic, r.r.Partition, r.r.Offset)
			msgs[i] = message(g.sub, r.r, ids[i])
		}
		req, err := webhooks.NewBatchRequest(g.sub.Endpoint.URL, msgs)
		if err != nil {
			g.deliverEach(recs) // a record that cannot be encoded is dead-lettered alone
			return
		}
		req.Signer, req.Auth, req.Timeout = g.signer(), g.auth, g.timeout
		g.tel.prop.Inject(ctx, propagation.HeaderCarrier(req.Header))
		res := g.n.sender.Deliver(ctx, req, policy, func(a webhooks.Attempt) { g.observeAttempt(ctx, span, a) })
		switch res.Outcome {
		case webhooks.OutcomeSuccess:
			br := webhooks.ParseBatchResponse(res.Last, ids)
			failed := make(map[string]bool, len(br.Failed))
			for _, id := range br.Failed {
				failed[id] = true
			}
			held := map[*lane]bool{}
			var again []*record
			for i, r := range recs {
				if failed[ids[i]] || r.lane != nil && held[r.lane] {
					if r.lane != nil {
						held[r.lane] = true
					}
					again = append(again, r)
					continue
				}
				g.ackBatched(ctx, r)
			}
			if len(again) == 0 {
				return
			}
			span.AddEvent("retry", trace.WithAttributes(attribute.Int("keyhook.failed", len(br.Failed)), attribute.Int("keyhook.round", round)))
			recs = again
			if policy.MaxAttempts > 0 && round >= policy.MaxAttempts || policy.MaxElapsed > 0 && time.Since(started) >= policy.MaxElapsed {
				g.deliverEach(recs)
				return
			}
			d := min(max(wait, br.RetryAfter), policy.MaxInterval)
			wait = min(time.Duration(float64(wait)*policy.Multiplier), policy.MaxInterval)
			if !sleepCtx(ctx, d) {
				g.abortAll(recs)
				return
			}
		case webhooks.OutcomeFinal:
			span.AddEvent("batch refused; delivering one by one", trace.WithAttributes(attribute.Int("http.response.status_code", res.Last.Status)))
			g.deliverEach(recs)
			return
		default:
			g.abortAll(recs)
			return
		}
	}
}

// deliverEach delivers records one at a time in batch order, which keeps
// each key's order; once one is aborted the rest are too.
func (g *group) deliverEach(recs []*record) {
	for i, r := range recs {
		if !g.deliver(r) {
			g.abortAll(recs[i:])
			return
		}
		r.w.pushResult(result{rec: r, acked: true})
	}
}

func (g *group) abortAll(recs []*record) {
	for _, r := range recs {
		r.w.pushResult(result{rec: r})
	}
}

// ackBatched records one record of a batch as delivered.
func (g *group) ackBatched(ctx context.Context, r *record) {
	g.delivered.Add(1)
	g.tel.deliveries.Add(ctx, 1, metric.WithAttributeSet(g.outcomeAttrs[outcomeDelivered]))
	if !r.r.Timestamp.IsZero() {
		g.tel.endToEnd.Record(ctx, time.Since(r.r.Timestamp).Seconds(), metric.WithAttributeSet(g.attrs))
	}
	r.w.pushResult(result{rec: r, acked: true})
}

func (g *group) request(rec *record, deliveryID string) (*webhooks.Request, error) {
	req, err := newRequest(g.sub, rec.r, deliveryID)
	if err != nil {
		return nil, err
	}
	req.Signer = g.signer()
	req.Auth = g.auth
	req.Timeout = g.timeout
	return req, nil
}

// newRequest puts record r in sub's format, unsigned and without auth.
// A batching subscription sends single records (a batch refused and sent
// one by one) as envelopes, the shape its endpoint reads in batches.
func newRequest(sub *subscription.Subscription, r *kgo.Record, deliveryID string) (*webhooks.Request, error) {
	f := webhooks.Format(sub.Format)
	if sub.Batch.Enabled() {
		f = webhooks.FormatEnvelope
	}
	return webhooks.NewRequest(sub.Endpoint.URL, f, message(sub, r, deliveryID), sub.CloudEventsType)
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

// signerState is a signer and the time it stops being right.
type signerState struct {
	signer *webhooks.Signer
	until  time.Time // zero: until the subscription changes
}

// signer returns the subscription's signer, rebuilt when a rotated-out
// secret expires. Two deliveries racing at the expiry both rebuild the
// same signer; either result is right.
func (g *group) signer() *webhooks.Signer {
	now := time.Now()
	if st := g.signing.Load(); st != nil && (st.until.IsZero() || now.Before(st.until)) {
		return st.signer
	}
	st := &signerState{signer: g.sub.Signer(now)}
	for _, sec := range g.sub.Signing.Secrets {
		if sec.ExpiresAt != nil && sec.ExpiresAt.After(now) && (st.until.IsZero() || sec.ExpiresAt.Before(st.until)) {
			st.until = *sec.ExpiresAt
		}
	}
	g.signing.Store(st)
	return st.signer
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
		Subscription: g.sub.ID, Record: rec.r, Topic: topic, DeliveryID: deliveryID,
		Status: res.Last.Status, Error: errText, Attempts: res.Attempts, First: res.First, Last: res.LastAt,
		TraceID: traceID,
	})
	if errors.Is(err, deadletter.ErrLoop) {
		g.log.Error("record not dead-lettered again: it would loop; acked, it stays in the topic it was read from",
			"topic", rec.r.Topic, "partition", rec.r.Partition, "offset", rec.r.Offset, "dead_letter_topic", topic,
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
