package dispatcher

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/keyhook/keyhook/deadletter"
	"github.com/keyhook/keyhook/delivery"
	"github.com/keyhook/keyhook/recordexpr"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/webhooks"
)

// DeliveryID names one delivery of one record to one subscription. It is
// the same for every attempt and every redelivery, so endpoints can
// deduplicate.
func DeliveryID(subscription, topic string, partition int32, offset int64) string {
	// Hashed from a buffer on the stack: every record gets an id, and a
	// hash.Hash would cost allocations each time.
	var scratch [256]byte
	b := append(scratch[:0], subscription...)
	b = append(b, 0)
	b = append(b, topic...)
	b = append(b, 0)
	b = strconv.AppendInt(b, int64(partition), 10)
	b = append(b, 0)
	b = strconv.AppendInt(b, offset, 10)
	sum := sha256.Sum256(b)
	var id [len(deliveryIDPrefix) + 24]byte
	copy(id[:], deliveryIDPrefix)
	hex.Encode(id[len(deliveryIDPrefix):], sum[:12])
	return string(id[:])
}

const deliveryIDPrefix = "dlv_"

// flight is one record's delivery, kept by the pool between attempts.
type flight struct {
	g *group
	w *worker
	// rec is the record delivered, which also names it in the result.
	rec *kgo.Record
	id  string
	// ctx carries the delivery's span; it ends when the partition is
	// lost, not at the drain deadline, so an attempt in flight then runs to
	// its own timeout.
	ctx    context.Context
	span   trace.Span
	req    *webhooks.Request
	reqErr error
	policy webhooks.RetryPolicy
	// rt is the budget of the current round of attempts; nil starts a
	// fresh one.
	rt *webhooks.Retries
	// ended, when not nil, is the final result the record starts from: a
	// batch's spent budget, taken instead of a fresh budget of its own.
	ended *webhooks.Result
	// last is the last result, for the span when the flight is stopped.
	last webhooks.Result
	// pending is the error of a record whose schema is not cached yet
	// (recordexpr.ErrNotReady): step shapes it again after pendingWait,
	// which grows up to the policy's longest backoff.
	pending     error
	pendingWait time.Duration
	// acked is the flight's result once it is done.
	acked bool
	// before counts the attempts of earlier rounds (a key blocked with
	// dead-lettering off starts a fresh budget after each).
	before int
	// pass is the breaker's pass of the next attempt, from the pool.
	pass *breakerPass
	// slot is the slot of the endpoint's origin the pool took for the
	// next attempt, if it did; the attempt gives it back.
	slot webhooks.Slot
	// msg is the record as rendered, kept here with room for its usual
	// attributes and headers so that rendering allocates none of them.
	msg     webhooks.Message
	attrs   [4]webhooks.Attr
	headers [4]webhooks.Header
	rt0     webhooks.Retries
}

// newFlight starts the delivery of rec, from ended when not nil.
func (g *group) newFlight(w *worker, rec *kgo.Record, ended *webhooks.Result) *flight {
	f := &flight{g: g, w: w, rec: rec, policy: g.ep.Policy(), ended: ended}
	f.id = DeliveryID(g.sub.ID, rec.Topic, rec.Partition, rec.Offset)
	f.ctx, f.span = g.startDelivery(w.attemptCtx, rec, f.id)
	fillMessage(&f.msg, f.attrs[:0], f.headers[:0], g.sub, rec, f.id, g.opts.source(rec.Topic))
	f.prepare()
	return f
}

// prepare shapes the message and renders its request. A record whose
// schema is not cached yet is left pending: step tries again with
// backoff, off the worker's goroutine and without holding a pool slot,
// until the registry answers; never dead-lettered for it.
func (f *flight) prepare() {
	g := f.g
	err := g.shape(&f.msg, f.rec)
	if recordexpr.IsNotReady(err) {
		f.pending = err
		return
	}
	f.pending = nil
	if f.reqErr = err; f.reqErr == nil {
		f.req, f.reqErr = g.ep.Render(&f.msg)
	}
	// The endpoint continues the delivery's trace: the sender writes the
	// trace context of f.ctx, or of its attempt span, into each attempt.
	if f.req != nil && f.span.IsRecording() {
		f.req.SpanAttributes = attemptAttrs(g, f.rec, f.id)
	}
}

// waitForSchema shapes a pending record again: the wait before the next
// try while its schema is still not cached, shown in the partition's
// status like a retry.
func (f *flight) waitForSchema() (time.Duration, bool) {
	if f.prepare(); f.pending == nil {
		f.pendingWait = 0
		return 0, false
	}
	f.pendingWait = min(max(2*f.pendingWait, 100*time.Millisecond), f.policy.WithDefaults().MaxInterval)
	f.note(webhooks.Result{Last: webhooks.Attempt{Err: f.pending}}, f.pendingWait, true)
	return f.pendingWait, true
}

func (f *flight) owner() *worker           { return f.w }
func (f *flight) size() int64              { return 1 }
func (f *flight) let(pass *breakerPass)    { f.pass = pass }
func (f *flight) heldSlot() *webhooks.Slot { return &f.slot }
func (f *flight) hold(d time.Duration) {
	if f.rt != nil {
		f.rt.Hold(d)
	}
}

// step makes one attempt, or settles the record once the delivery ended:
// acked when delivered or dead-lettered, pushed back unacked when its
// partition's deliveries are aborted.
func (f *flight) step() (time.Duration, bool) {
	g := f.g
	if f.w.deliverCtx.Err() != nil {
		f.stop()
		return 0, true
	}
	if f.pending != nil {
		wait, more := f.waitForSchema()
		switch {
		case !more:
		case f.w.outbox.isExpiring(f.rec) && g.sub.DeadLetterTopicFor(f.rec.Topic) != "":
			// The registry has not answered for as long as the topic
			// keeps records: dead-lettered, undecoded, before retention
			// deletes it, like a record whose endpoint failed as long.
			f.reqErr, f.pending = fmt.Errorf("%w (%w)", errRetention, f.pending), nil
		default:
			return wait, false
		}
	}
	if errors.Is(f.reqErr, delivery.ErrFiltered) {
		// Its schema was not cached when the worker read it: the filter
		// decided only now. Acked unsent, like a record filtered there.
		g.filtered.Add(1)
		g.tel.filtered.Add(f.ctx, 1, g.opts.subAdd...)
		f.span.SetAttributes(attrOutcome.String("filtered"))
		f.span.End()
		return 0, f.done(true)
	}
	var res webhooks.Result
	switch {
	case f.ended != nil:
		res, f.ended = *f.ended, nil
	case f.rt != nil && f.w.outbox.isExpiring(f.rec) && g.sub.DeadLetterTopicFor(f.rec.Topic) != "":
		// It failed, and retention is about to delete it: no further
		// attempt, it goes to the dead-letter topic now with its attempts
		// so far. (One not tried yet gets its attempt first.)
		res = f.rt.Result()
		res.Outcome, res.Err = webhooks.OutcomeFinal, errRetention
		f.rt = nil
	case f.reqErr != nil:
		now := time.Now()
		res = webhooks.Result{Outcome: webhooks.OutcomeFinal, Err: f.reqErr, First: now, LastAt: now,
			Last: webhooks.Attempt{Err: f.reqErr, Started: now}}
	default:
		if f.rt == nil {
			f.rt0.Reset(f.policy, nil)
			f.rt = &f.rt0
		}
		if !f.rt.Done() {
			wait, more, ok := f.attempt()
			if !ok {
				f.stop()
				return 0, true
			}
			if more {
				return wait, false
			}
		}
		res = f.rt.Result()
		f.rt = nil
	}
	f.last = res
	switch res.Outcome {
	case webhooks.OutcomeSuccess:
		g.delivered.Add(1)
		g.endDelivery(f.ctx, f.span, f.rec, outcomeDelivered, res)
		return 0, f.done(true)
	case webhooks.OutcomeFinal:
		dlq := g.sub.DeadLetterTopicFor(f.rec.Topic)
		if dlq == "" {
			// Dead-lettering is off: the key blocks and the record is
			// tried again, with a fresh budget, after the longest backoff.
			g.log.Warn("delivery failed and dead-lettering is off; key blocked",
				"topic", f.rec.Topic, "partition", f.rec.Partition, "offset", f.rec.Offset,
				"status", res.Last.Status, "trace_id", traceID(f.span))
			f.span.AddEvent("blocked", trace.WithAttributes(attribute.Int("http.response.status_code", res.Last.Status)))
			wait := f.policy.WithDefaults().MaxInterval
			f.note(res, wait, true)
			f.before += res.Attempts
			return wait, false
		}
		f.span.AddEvent("dead_letter", trace.WithAttributes(
			attribute.String("keyhook.dead_letter_topic", dlq),
			attribute.Int("http.response.status_code", res.Last.Status),
			attribute.Int("keyhook.attempts", res.Attempts)))
		// The dead letter is written until it is durable or the drain
		// deadline passes, whichever comes first.
		ctx, cancel := withCancelOf(f.ctx, f.w.deliverCtx)
		err := g.deadLetter(ctx, f.rec, f.id, dlq, res, traceID(f.span))
		cancel()
		switch {
		case errors.Is(err, deadletter.ErrLoop):
			g.endDelivery(f.ctx, f.span, f.rec, outcomeDeadLetterLoop, res)
			return 0, f.done(true)
		case err != nil:
			g.endDelivery(f.ctx, f.span, f.rec, outcomeAborted, res)
			return 0, f.done(false)
		}
		g.deadLettered.Add(1)
		g.noteDeadLetter()
		g.tel.deadLetters.Add(f.ctx, 1, g.opts.subAdd...)
		g.endDelivery(f.ctx, f.span, f.rec, outcomeDeadLettered, res)
		return 0, f.done(true)
	default:
		g.endDelivery(f.ctx, f.span, f.rec, outcomeAborted, res)
		return 0, f.done(false) // aborted: shutdown or lost partition
	}
}

// attempt makes attempt num of r: in slot when the pool took one of the
// endpoint origin's for it, else waiting for one in the sender.
func (n *Node) attempt(ctx context.Context, r *webhooks.Request, num int, slot *webhooks.Slot) (webhooks.Attempt, error) {
	if slot.Held() {
		return n.slotted.AttemptIn(ctx, r, num, slot), nil
	}
	return n.sender.Attempt(ctx, r, num)
}

// attempt makes the round's next attempt: ok is false when it was cut
// short (the partition is lost), more when the budget wants another after
// wait.
func (f *flight) attempt() (wait time.Duration, more, ok bool) {
	g := f.g
	a, err := g.n.attempt(f.ctx, f.req, f.rt.Next(), &f.slot)
	if err != nil {
		f.last = f.rt.Interrupt(err)
		return 0, false, false
	}
	g.observeAttempt(f.ctx, f.span, a)
	if webhooks.Classify(a) == webhooks.OutcomeRetry && f.ctx.Err() != nil {
		// Cut by the abort, not answered by the endpoint: no ack.
		f.last = f.rt.Interrupt(context.Cause(f.ctx))
		return 0, false, false
	}
	f.pass.report(a)
	wait, more = f.rt.Record(a)
	f.last = f.rt.Result()
	// Numbered over the rounds of a key blocked with dead-lettering off.
	a.Number += f.before
	g.noteAttempt(f.rec, f.id, a, more)
	if more {
		// Only a record that waits is worth a note: one answered goes.
		f.note(f.last, wait, more)
	}
	return wait, more, true
}

// note tells the worker the record's latest attempt, for the status of a
// record holding its partition's watermark.
func (f *flight) note(res webhooks.Result, wait time.Duration, more bool) {
	p := progress{attempts: f.before + res.Attempts, status: res.Last.Status}
	if res.Last.Err != nil {
		p.err = res.Last.Err.Error()
	}
	if more {
		p.next = time.Now().Add(wait)
	}
	f.w.noteProgress(f.rec, p)
}

// stop ends the flight unacked, its last attempt failed or cut short.
func (f *flight) stop() {
	f.g.endDelivery(f.ctx, f.span, f.rec, outcomeAborted, f.last)
	f.done(false)
}

// done hands the record's result back to its worker.
func (f *flight) done(acked bool) bool {
	f.acked = acked
	f.w.pushResult(result{rec: f.rec, acked: acked})
	return true
}

// withCancelOf is ctx, also cancelled when other ends.
func withCancelOf(ctx, other context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(other, func() { cancel(context.Cause(other)) })
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// batchFlight delivers records assembled by one worker in batch requests
// (see subscription.Batch, webhooks.BatchRetries). Every record ends acked
// or aborted, and a key's records are acked in offset order: a record the
// endpoint reports failed holds back the later records of its key, and
// they go again together, every request counting once against the
// subscription's retry budget. A batch the endpoint refuses for good is
// delivered record by record, so only a bad record is dead-lettered;
// records still failing when the budget is spent are dead-lettered as
// they are, without a fresh budget each. Between requests, and between
// the attempts of those records, it waits off the pool's slots like any
// flight.
type batchFlight struct {
	g    *group
	w    *worker
	recs []*kgo.Record
	ctx  context.Context
	span trace.Span
	br   *webhooks.BatchRetries
	// each, once the batch request ended short of success, are the
	// records delivered one at a time in batch order, which keeps each
	// key's order; cur is the one under way.
	each  []*kgo.Record
	cur   *flight
	ended *webhooks.Result
	held  map[*kgo.Record]bool
	// pass is the breaker's pass of the next request, from the pool.
	pass *breakerPass
	// slot is the origin's slot the pool took for the next request, if
	// it did; the request, or the record delivered next, gives it back.
	slot webhooks.Slot
}

func (g *group) newBatchFlight(w *worker, jobs []job) *batchFlight {
	recs := make([]*kgo.Record, len(jobs))
	for i, j := range jobs {
		recs[i] = j.rec
	}
	ctx, span := g.tel.tracer.Start(w.attemptCtx, "process batch "+recs[0].Topic,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attrSubscription.String(g.sub.ID), attribute.Int("messaging.batch.message_count", len(recs))))
	b := &batchFlight{g: g, w: w, recs: recs, ctx: ctx, span: span}
	b.br = webhooks.NewBatchRetries(&webhooks.BatchDelivery{
		Messages: batchMessages(g.sub, jobs),
		Render:   g.ep.RenderBatch,
		OnAttempt: func(a webhooks.Attempt) {
			g.observeAttempt(ctx, span, a)
			g.noteAttempt(nil, "", a, false)
		},
		OnDelivered: func(i int) { g.ackBatched(ctx, w, recs[i]) },
	}, g.ep.Policy(), nil)
	return b
}

func (b *batchFlight) owner() *worker           { return b.w }
func (b *batchFlight) let(pass *breakerPass)    { b.pass = pass }
func (b *batchFlight) heldSlot() *webhooks.Slot { return &b.slot }

func (b *batchFlight) hold(d time.Duration) {
	switch {
	case b.br != nil:
		b.br.Hold(d)
	case b.cur != nil:
		b.cur.hold(d)
	}
}

func (b *batchFlight) size() int64 {
	if b.br == nil {
		return 1 // one record at a time
	}
	return int64(len(b.br.Result().Pending))
}

func (b *batchFlight) step() (time.Duration, bool) {
	if b.br != nil {
		if b.w.deliverCtx.Err() != nil {
			b.stop()
			return 0, true
		}
		if !b.br.Done() {
			req, n, ok := b.br.Request()
			if ok {
				a, err := b.g.n.attempt(b.ctx, req, n, &b.slot)
				if err != nil {
					b.stop()
					return 0, true
				}
				wait, more := b.br.Record(a)
				if more && b.ctx.Err() != nil {
					// Cut by the abort: what the endpoint took is acked,
					// the rest stays pending.
					b.stop()
					return 0, true
				}
				b.pass.report(a)
				if more {
					return wait, false
				}
			}
		}
		if !b.settle() {
			return 0, true
		}
	}
	return b.stepEach()
}

// settle takes the batch request's end: true when records are left to
// deliver one at a time.
func (b *batchFlight) settle() bool {
	res := b.br.Result()
	b.br = nil
	pending := make([]*kgo.Record, len(res.Pending))
	for j, i := range res.Pending {
		pending[j] = b.recs[i]
	}
	switch {
	case res.Outcome == webhooks.OutcomeSuccess:
	case res.Outcome == webhooks.OutcomeFinal && res.Refused:
		b.span.AddEvent("batch refused; delivering one by one", trace.WithAttributes(attribute.Int("http.response.status_code", res.Last.Status)))
		b.each = pending
	case res.Outcome == webhooks.OutcomeFinal:
		b.span.AddEvent("retry budget spent", trace.WithAttributes(attribute.Int("keyhook.failed", len(pending)-len(res.Held)), attribute.Int("keyhook.attempts", res.Attempts)))
		b.held = make(map[*kgo.Record]bool, len(res.Held))
		for _, i := range res.Held {
			b.held[b.recs[i]] = true
		}
		b.each, b.ended = pending, &res.Result
	default:
		b.g.abortAll(b.w, pending)
	}
	if len(b.each) == 0 {
		b.span.End()
		return false
	}
	return true
}

// stepEach runs the records left one at a time; once one is aborted the
// rest are too. Held records were taken by the endpoint in the last
// request and waited only for an earlier record of their key, settled by
// now.
func (b *batchFlight) stepEach() (time.Duration, bool) {
	for len(b.each) > 0 || b.cur != nil {
		if b.cur == nil {
			if !b.w.owned() {
				// Each record is a first attempt of its own: it waits,
				// as the pool's tasks do, until the ownership is
				// confirmed again.
				return b.g.n.cfg.FlushInterval, false
			}
			r := b.each[0]
			b.each = b.each[1:]
			if b.held[r] {
				b.g.ackBatched(b.ctx, b.w, r)
				continue
			}
			b.cur = b.g.newFlight(b.w, r, b.ended)
		}
		b.cur.pass, b.pass = b.pass, nil
		b.cur.slot, b.slot = b.slot, webhooks.Slot{}
		wait, done := b.cur.step()
		b.cur.slot.Release(0) // when it made no attempt
		if !done {
			return wait, false
		}
		acked := b.cur.acked
		b.cur = nil
		if !acked {
			b.g.abortAll(b.w, b.each)
			b.each = nil
		}
		if len(b.each) > 0 && b.g.pool.gated() {
			// Each request takes its own token, breaker pass and
			// origin's slot: the next record goes through the pool
			// again.
			return 0, false
		}
	}
	b.span.End()
	return 0, true
}

// stop ends the batch unacked: what is pending of the batch request, or
// the record under way and those after it.
func (b *batchFlight) stop() {
	if b.br != nil {
		b.g.abortAll(b.w, pendingOf(b.recs, b.br.Result().Pending))
		b.br = nil
	}
	if b.cur != nil {
		b.cur.stop()
		b.cur = nil
	}
	b.g.abortAll(b.w, b.each)
	b.each = nil
	b.span.End()
}

func pendingOf(recs []*kgo.Record, idx []int) []*kgo.Record {
	out := make([]*kgo.Record, len(idx))
	for j, i := range idx {
		out[j] = recs[i]
	}
	return out
}

// batchMessages is a batch's jobs as webhooks sees a batch: each
// record's message and its ordering group, the key lane it belongs to
// (none when the subscription does not order by key).
func batchMessages(sub *subscription.Subscription, jobs []job) []webhooks.BatchMessage {
	lanes := make(map[string]int64)
	out := make([]webhooks.BatchMessage, len(jobs))
	for i, j := range jobs {
		group := int64(webhooks.NoGroup)
		if j.laned {
			g, ok := lanes[j.lane]
			if !ok {
				g = int64(len(lanes))
				lanes[j.lane] = g
			}
			group = g
		}
		r := j.rec
		id := DeliveryID(sub.ID, r.Topic, r.Partition, r.Offset)
		out[i] = webhooks.BatchMessage{Message: message(sub, r, id), Group: group}
	}
	return out
}

func (g *group) abortAll(w *worker, recs []*kgo.Record) {
	for _, r := range recs {
		w.pushResult(result{rec: r})
	}
}

// ackBatched records one record of a batch as delivered.
func (g *group) ackBatched(ctx context.Context, w *worker, r *kgo.Record) {
	g.delivered.Add(1)
	g.tel.deliveries.Add(ctx, 1, g.opts.outcomeAdd[outcomeDelivered]...)
	if !r.Timestamp.IsZero() {
		g.tel.endToEnd.Record(ctx, time.Since(r.Timestamp).Seconds(), g.opts.subRecord...)
	}
	w.pushResult(result{rec: r, acked: true})
}

// message is record r as webhooks sees it: no Kafka, just a message with
// its attributes.
func message(sub *subscription.Subscription, r *kgo.Record, deliveryID string) *webhooks.Message {
	m := new(webhooks.Message)
	fillMessage(m, make([]webhooks.Attr, 0, 4), make([]webhooks.Header, 0, len(r.Headers)), sub, r, deliveryID, "kafka://"+r.Topic)
	return m
}

// fillMessage fills m with record r as [message] does, its attributes and
// headers appended to attrs and headers, which must be empty and not nil.
// source is "kafka://" and the topic.
func fillMessage(m *webhooks.Message, attrs []webhooks.Attr, headers []webhooks.Header, sub *subscription.Subscription, r *kgo.Record, deliveryID, source string) {
	for _, h := range r.Headers {
		headers = append(headers, webhooks.Header{Name: h.Key, Value: h.Value})
	}
	// "partition/offset" is the subject; the partition and the offset
	// attributes are cut from it, one string for the three.
	var scratch [48]byte
	b := strconv.AppendInt(scratch[:0], int64(r.Partition), 10)
	slash := len(b)
	b = append(b, '/')
	b = strconv.AppendInt(b, r.Offset, 10)
	subject := string(b)
	partition, offset := subject[:slash], subject[slash+1:]
	*m = webhooks.Message{
		ID: deliveryID, Key: r.Key, Value: r.Value, Headers: headers, Time: r.Timestamp,
		Source:  source,
		Subject: subject,
		Attributes: append(attrs,
			webhooks.Attr{Name: "subscription", Value: sub.ID}, webhooks.Attr{Name: "topic", Value: r.Topic},
			webhooks.Attr{Name: "partition", Value: partition}, webhooks.Attr{Name: "offset", Value: offset}),
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
func (g *group) deadLetter(ctx context.Context, rec *kgo.Record, deliveryID, topic string, res webhooks.Result, traceID string) error {
	errText := ""
	switch {
	case res.Err != nil:
		errText = res.Err.Error()
	case res.Last.Err != nil:
		errText = res.Last.Err.Error()
	}
	err := g.dlw.Write(ctx, deadletter.Letter{
		Subscription: g.sub.ID, Record: rec, Topic: topic, DeliveryID: deliveryID,
		Status: res.Last.Status, Error: errText, Attempts: res.Attempts, First: res.First, Last: res.LastAt,
		TraceID: traceID,
	})
	if errors.Is(err, deadletter.ErrLoop) {
		g.log.Error("record not dead-lettered again: it would loop; acked, it stays in the topic it was read from",
			"topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "dead_letter_topic", topic,
			"status", res.Last.Status, "err", err, "trace_id", traceID)
	}
	return err
}
