package webhooks

import (
	"context"
	"fmt"
	"time"
)

// NoGroup is the Group of a [BatchMessage] whose order does not matter.
const NoGroup = -1

// BatchMessage is one message of a batch delivery.
type BatchMessage struct {
	Message *Message
	// Group names the message's ordering group (for keyhook, its key's
	// lane): a message of a group is acked only after the earlier messages
	// of that group in the batch, so one that fails holds back the later
	// ones, which go again with it. [NoGroup] (-1): no order to keep.
	Group int64
}

// BatchDelivery is what [Client.DeliverBatch] sends and whom it tells.
type BatchDelivery struct {
	// Messages are the batch's messages, in order. Each needs an ID,
	// unique within the batch.
	Messages []BatchMessage
	// Render builds the request of one attempt from the messages still
	// pending, in batch order (see [NewBatchRequest]); it is called once
	// per attempt since each attempt may hold fewer messages. An error
	// refuses the batch: [BatchDeliveryResult.Refused].
	Render func(ms []*Message) (*Request, error)
	// OnAttempt, if not nil, is called after every attempt, on the
	// calling goroutine.
	OnAttempt func(Attempt)
	// OnDelivered, if not nil, is called with the index in Messages of
	// each message as soon as an attempt delivers it, in batch order, so
	// in each group's order. It is never called twice for one message.
	OnDelivered func(i int)
}

// BatchDeliveryResult is how a batch delivery ended.
type BatchDeliveryResult struct {
	// Result is the delivery of the batch as a whole: Outcome
	// OutcomeSuccess when every message was delivered, OutcomeFinal when
	// some never will be by this batch, OutcomeRetry when ctx ended first
	// (the pending messages must not be acked). Attempts counts requests.
	Result
	// Pending lists the indexes in Messages of the messages not delivered,
	// in order; empty on success.
	Pending []int
	// Held lists, in order, the pending messages that the last attempt
	// delivered but that wait for an earlier failed message of their group;
	// once that one is settled (dead-lettered, say) they are delivered and
	// need no other request. Only an OutcomeFinal that is not Refused
	// carries them.
	Held []int
	// Refused reports an OutcomeFinal where the endpoint refused the batch
	// as a whole (a final status such as 400) or it could not be rendered:
	// a single bad message may be the reason, so the pending messages
	// deserve to be delivered one by one. Otherwise an OutcomeFinal means
	// the retry budget is spent ([ErrRetryBudgetExhausted]) and the
	// pending messages are final as they are.
	Refused bool
}

// DeliverBatch delivers b.Messages in batch requests until every message
// is delivered, the batch is refused, p's budget is spent or ctx ends.
// It is [Client.Deliver] for batches and spends one budget the same way:
// every request counts once against p.MaxAttempts and p.MaxElapsed,
// whether it carried the whole batch or what was left of it. After a
// partial failure ([ParseBatchResponse]) only the failed messages and the
// later messages of their groups go again, after the backoff or the
// endpoint's retry_after, whichever is longer; a batch failing as a whole
// with a retryable status goes again entire. Like Deliver it holds its
// goroutine through the waits; [BatchRetries] lets the caller keep them.
func (c *Client) DeliverBatch(ctx context.Context, b *BatchDelivery, p RetryPolicy) BatchDeliveryResult {
	br := NewBatchRetries(b, p, c.clock)
	for !br.Done() {
		req, n, ok := br.Request()
		if !ok {
			break
		}
		a, err := c.limited(ctx, req, n)
		if err != nil {
			return br.Interrupt(context.Cause(ctx))
		}
		wait, more := br.Record(a)
		if more && !c.sleep(ctx, wait) {
			return br.Interrupt(context.Cause(ctx))
		}
	}
	return br.Result()
}

// BatchRetries is a batch delivery spent one request at a time, as
// [Retries] is for one request: the caller sends each [BatchRetries.Request]
// (with [Client.Attempt]), hands the attempt to [BatchRetries.Record] and
// waits as long as it says. [Client.DeliverBatch] is a BatchRetries run to
// its end on one goroutine. It is not safe for concurrent use.
type BatchRetries struct {
	b       *BatchDelivery
	rt      *Retries
	clock   Clock
	pending []int
	held    []int
	ids     []string
	refused bool
}

// NewBatchRetries returns the delivery of b under p, timed by clock (nil:
// the system clock); an invalid p ends it at once, as [NewRetries] does.
func NewBatchRetries(b *BatchDelivery, p RetryPolicy, clock Clock) *BatchRetries {
	if clock == nil {
		clock = systemClock{}
	}
	br := &BatchRetries{b: b, rt: NewRetries(p, clock), clock: clock, pending: make([]int, len(b.Messages))}
	for i := range br.pending {
		br.pending[i] = i
	}
	return br
}

// Request renders the request of the next attempt, numbered n, from the
// messages still pending, in batch order. A render error refuses the
// batch: ok is false and the delivery is done.
func (br *BatchRetries) Request() (req *Request, n int, ok bool) {
	n = br.rt.Next()
	ms := make([]*Message, len(br.pending))
	br.ids = make([]string, len(br.pending))
	for j, i := range br.pending {
		ms[j] = br.b.Messages[i].Message
		if ms[j] != nil {
			br.ids[j] = ms[j].ID
		}
	}
	br.held = nil
	req, err := br.b.Render(ms)
	if err != nil {
		br.refused = true
		err = fmt.Errorf("webhooks: render batch: %w", err)
		br.rt.record(step{a: Attempt{Number: n, Err: err, Started: br.clock.Now()}, outcome: OutcomeFinal, err: err})
		return nil, n, false
	}
	return req, n, true
}

// Record takes the answer to the last Request: it tells b.OnAttempt,
// reports the messages it delivered to b.OnDelivered, and returns how long
// to wait before the next attempt, or more false when the delivery ended.
// Hold takes d off the time counted against the policy's MaxElapsed, as
// [Retries.Hold] does.
func (br *BatchRetries) Hold(d time.Duration) { br.rt.Hold(d) }

func (br *BatchRetries) Record(a Attempt) (wait time.Duration, more bool) {
	if br.b.OnAttempt != nil {
		br.b.OnAttempt(a)
	}
	res := ParseBatchResponse(a, br.ids)
	if res.Outcome == OutcomeFinal {
		br.refused = true
		return br.rt.record(step{a: a, outcome: OutcomeFinal, err: res.Err})
	}
	br.pending, br.held = settle(br.b, br.pending, res)
	if len(br.pending) == 0 {
		return br.rt.record(step{a: a, outcome: OutcomeSuccess})
	}
	s := step{a: a, outcome: OutcomeRetry, retryAfter: res.RetryAfter}
	if Classify(a) == OutcomeSuccess {
		s.err = res.Err // a 2xx that failed some: say so, not "last status 200"
	}
	return br.rt.record(s)
}

// Done reports that the delivery ended: Result says how.
func (br *BatchRetries) Done() bool { return br.rt.Done() }

// Interrupt ends the delivery without another request, because of cause:
// OutcomeRetry, its pending messages not to be acked.
func (br *BatchRetries) Interrupt(cause error) BatchDeliveryResult {
	br.rt.Interrupt(cause)
	return br.Result()
}

// Result is how the delivery ended, or where it stands while it goes on.
func (br *BatchRetries) Result() BatchDeliveryResult {
	res := br.rt.Result()
	out := BatchDeliveryResult{Result: res}
	if res.Outcome != OutcomeSuccess {
		out.Pending = br.pending
		out.Refused = br.refused && res.Outcome == OutcomeFinal
		if res.Outcome == OutcomeFinal && !out.Refused {
			out.Held = br.held
		}
	}
	return out
}

// settle reports the messages br delivered and returns those still
// pending, in order: the failed ones and, after a failure in a group, the
// later messages of that group, delivered or not, since they must not be
// acked before it. held lists the pending ones that br delivered.
func settle(b *BatchDelivery, pending []int, br BatchResult) (again, held []int) {
	failed := make(map[string]bool, len(br.Failed))
	for _, id := range br.Failed {
		failed[id] = true
	}
	stopped := map[int64]bool{}
	for _, i := range pending {
		m := b.Messages[i]
		g := m.Group
		if failed[m.Message.ID] || g != NoGroup && stopped[g] {
			if g != NoGroup {
				stopped[g] = true
			}
			again = append(again, i)
			if !failed[m.Message.ID] {
				held = append(held, i)
			}
			continue
		}
		if b.OnDelivered != nil {
			b.OnDelivered(i)
		}
	}
	return again, held
}
