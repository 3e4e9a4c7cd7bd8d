package dispatcher

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/metric"

	"github.com/keyhook/keyhook/breaker"
	"github.com/keyhook/keyhook/webhooks"
)

// newBreakers builds the node's circuit breakers, one per endpoint
// origin, shared by its subscriptions: each transition is logged once,
// counted, and handed to Config.OnBreakerTransition.
func newBreakers(n *Node) (*breaker.Set, error) {
	return breaker.NewSet(breaker.Config{
		Failures: n.cfg.BreakerFailures,
		Interval: n.cfg.BreakerInterval,
		OnTransition: func(tr breaker.Transition) {
			log := n.log.Warn
			if tr.To == breaker.Closed {
				log = n.log.Info
			}
			log("circuit breaker "+tr.To.String(), "origin", tr.Origin, "from", tr.From.String(), "reason", tr.Reason)
			if n.tel != nil {
				n.tel.breakerTransitions.Add(context.Background(), 1, metric.WithAttributes(attrOrigin.String(tr.Origin), attrState.String(tr.To.String())))
			}
			if n.cfg.OnBreakerTransition != nil {
				n.cfg.OnBreakerTransition(tr)
			}
		},
	})
}

// Breakers lists the circuit breakers of this node that are open or
// half-open, by origin.
func (n *Node) Breakers() []breaker.Status { return n.breakers.NotClosed() }

// breakerPass is an attempt its origin's breaker let through; the
// attempt's verdict goes back to the breaker once. A nil pass (breakers
// off) does nothing.
type breakerPass struct {
	b        *breaker.Breaker
	p        breaker.Pass
	reported bool
}

// report tells the breaker what attempt a says of the origin.
func (bp *breakerPass) report(a webhooks.Attempt) {
	if bp == nil || bp.reported {
		return
	}
	bp.reported = true
	v, why := verdict(a)
	bp.b.Report(bp.p, v, why)
}

// end gives back a pass whose attempt was not made (or was cut short).
func (bp *breakerPass) end() {
	if bp == nil || bp.reported {
		return
	}
	bp.reported = true
	bp.b.Release(bp.p)
}

// verdict is what an attempt says of its origin: up when it answered,
// even a final 4xx; down at 5xx, 408, 425, a timeout or a connection
// error; nothing at 429, which asks for less, not for none (the origin's
// AIMD limiter answers it), nor when the attempt refused to go
// (a forbidden address, an invalid request).
func verdict(a webhooks.Attempt) (breaker.Verdict, string) {
	switch {
	case a.Status == http.StatusTooManyRequests:
		return breaker.Neutral, ""
	case a.Status != 0 && webhooks.Classify(a) == webhooks.OutcomeRetry:
		return breaker.Failure, strconv.Itoa(a.Status)
	case a.Status != 0:
		return breaker.Success, ""
	case webhooks.Classify(a) == webhooks.OutcomeFinal, errors.Is(a.Err, context.Canceled):
		return breaker.Neutral, ""
	case a.Err != nil:
		return breaker.Failure, a.Err.Error()
	}
	return breaker.Failure, "no answer"
}
