package dispatcher

import (
	"github.com/twmb/franz-go/pkg/kgo"
	"time"

	"github.com/keyhook/keyhook/deliverylog"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/webhooks"
)

// Health is told what an operator must hear about an endpoint; the
// monitor.Monitor implements it. Both calls run on delivery goroutines
// and must return at once.
type Health interface {
	// Attempt is an attempt's outcome (ok: 2xx) for a subscription that
	// sets disable_after, made at at.
	Attempt(sub *subscription.Subscription, ok bool, at time.Time)
	// DeadLettered is one record of the subscription dead-lettered.
	DeadLettered(subscriptionID string)
}

// AttemptLog keeps each delivery's attempts; deliverylog.Writer
// implements it. Log runs on delivery goroutines and must never block.
type AttemptLog interface {
	Log(deliverylog.Entry)
	// BodyBytes is how much of a response body an entry keeps.
	BodyBytes() int
}

// noteAttempt tells the health monitor and the delivery log of an
// attempt of the record rec's delivery id (nil for a batch request, which
// the log does not keep), whose round goes on when more.
func (g *group) noteAttempt(rec *kgo.Record, deliveryID string, a webhooks.Attempt, more bool) {
	ok := webhooks.Classify(a) == webhooks.OutcomeSuccess
	if g.watchHealth {
		g.n.cfg.Health.Attempt(g.sub, ok, a.Started)
	}
	log := g.n.cfg.AttemptLog
	if log == nil || rec == nil {
		return
	}
	e := deliverylog.Entry{
		Subscription: g.sub.ID, DeliveryID: deliveryID,
		Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset,
		Attempt: deliverylog.Attempt{
			Number: a.Number, Time: a.Started, Status: a.Status,
			LatencyMS: float64(a.Duration.Microseconds()) / 1000,
		},
	}
	switch {
	case ok:
		e.Attempt.Result = deliverylog.ResultDelivered
	case more:
		e.Attempt.Result = deliverylog.ResultRetry
	default:
		e.Attempt.Result = deliverylog.ResultFailed
	}
	if a.Err != nil {
		e.Attempt.Error = a.Err.Error()
	}
	if len(a.Body) > 0 {
		// A copy: the sender reuses the attempt's buffer.
		e.Attempt.Body, e.Attempt.BodyTruncated = deliverylog.Excerpt(a.Body, log.BodyBytes())
		e.Attempt.BodyTruncated = e.Attempt.BodyTruncated || a.BodyTruncated
	}
	if a.ContentType != "" || a.RetryAfter > 0 {
		e.Attempt.Headers = make(map[string]string, 2)
		if a.ContentType != "" {
			e.Attempt.Headers["Content-Type"] = a.ContentType
		}
		if a.RetryAfter > 0 {
			e.Attempt.Headers["Retry-After"] = a.RetryAfter.String()
		}
	}
	log.Log(e)
}

// noteDeadLetter tells the health monitor of a dead letter.
func (g *group) noteDeadLetter() {
	if h := g.n.cfg.Health; h != nil {
		h.DeadLettered(g.sub.ID)
	}
}
