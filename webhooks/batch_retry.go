package webhooks

import (
	"context"
	"fmt"
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
// with a retryable status goes again entire.
func (c *Client) DeliverBatch(ctx context.Context, b *BatchDelivery, p RetryPolicy) BatchDeliveryResult {
	pending := make([]int, len(b.Messages))
	for i := range pending {
		pending[i] = i
	}
	refused := false
	var held []int
	res := c.retry(ctx, p, func(ctx context.Context, n int) (step, error) {
		ms := make([]*Message, len(pending))
		ids := make([]string, len(pending))
		for j, i := range pending {
			ms[j] = b.Messages[i].Message
			if ms[j] != nil {
				ids[j] = ms[j].ID
			}
		}
		held = nil
		req, err := b.Render(ms)
		if err != nil {
			refused = true
			now := c.clock.Now()
			err = fmt.Errorf("webhooks: render batch: %w", err)
			return step{a: Attempt{Number: n, Err: err, Started: now}, outcome: OutcomeFinal, err: err}, nil
		}
		a, err := c.limited(ctx, req, n)
		if err != nil {
			return step{}, err
		}
		if b.OnAttempt != nil {
			b.OnAttempt(a)
		}
		br := ParseBatchResponse(a, ids)
		if br.Outcome == OutcomeFinal {
			refused = true
			return step{a: a, outcome: OutcomeFinal, err: br.Err}, nil
		}
		pending, held = settle(b, pending, br)
		if len(pending) == 0 {
			return step{a: a, outcome: OutcomeSuccess}, nil
		}
		s := step{a: a, outcome: OutcomeRetry, retryAfter: br.RetryAfter}
		if Classify(a) == OutcomeSuccess {
			s.err = br.Err // a 2xx that failed some: say so, not "last status 200"
		}
		return s, nil
	})
	out := BatchDeliveryResult{Result: res}
	if res.Outcome != OutcomeSuccess {
		out.Pending = pending
		out.Refused = refused && res.Outcome == OutcomeFinal
		if res.Outcome == OutcomeFinal && !out.Refused {
			out.Held = held
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
