package webhooks

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// batchContentType is the media type of a batch request.
const batchContentType = "application/json"

// Batch is the body of a batch request. Batching sends many messages in
// one request, for endpoints that pay per invocation (FaaS) or prefer
// fewer, larger calls. The contract, which the README quotes:
//
// Request: a POST with Content-Type application/json and the body
//
//	{"deliveries": [<envelope>, ...]}
//
// where each element is an [Envelope], in order; webhook-id is the batch
// id ([BatchID]) and the signature covers the whole body.
//
// Response:
//   - 2xx whose body is a JSON object with a "failed" array of delivery ids,
//     optionally with "retry_after" (seconds, a JSON number):
//     {"failed": ["dlv_...", ...], "retry_after": 30}. The listed
//     deliveries failed and are retried, after retry_after when given; all
//     others succeeded. Ids that were not in the batch are ignored.
//   - any other 2xx (empty body, not JSON, no "failed" member, "failed"
//     empty or null): every delivery succeeded.
//   - anything else (non-2xx, no response): every delivery failed, retried
//     or final as [Classify] decides for the request as a whole, with the
//     Retry-After header honoured.
//
// Two cases lean toward retrying, since a duplicate costs less than a
// loss: a "failed" member that is not an array of strings fails every
// delivery, and so does a 2xx body cut at ClientConfig.MaxResponseBytes
// that mentions "failed".
type Batch struct {
	Deliveries []*Envelope `json:"deliveries"`
}

// BatchResponse is the partial-failure answer of a batch endpoint; see
// [Batch] for the contract.
type BatchResponse struct {
	// Failed lists the delivery ids the endpoint did not accept.
	Failed []string `json:"failed"`
	// RetryAfter, in seconds, asks to wait before retrying them. 0 means
	// no preference.
	RetryAfter float64 `json:"retry_after,omitempty"`
}

// EncodeBatch renders ms as one batch request body ([Batch]) and returns it
// with its headers, Content-Type included. Every message needs an ID,
// unique within the batch, since the response names failures by ID.
func EncodeBatch(ms []*Message) (body []byte, header http.Header, err error) {
	if len(ms) == 0 {
		return nil, nil, invalidMessage("a batch needs at least one message")
	}
	seen := make(map[string]bool, len(ms))
	// As encoding/json writes a Batch, one envelope after another.
	body = make([]byte, 0, 512*len(ms))
	body = append(body, `{"deliveries":[`...)
	for i, m := range ms {
		if m == nil {
			return nil, nil, invalidMessage("batch message %d is nil", i)
		}
		if seen[m.ID] {
			return nil, nil, invalidMessage("batch message %d repeats the id %q", i, m.ID)
		}
		seen[m.ID] = true
		if err := checkAttributes(m.Attributes); err != nil {
			return nil, nil, fmt.Errorf("batch message %d: %w", i, err)
		}
		if i > 0 {
			body = append(body, ',')
		}
		if body, err = appendEnvelope(body, m); err != nil {
			return nil, nil, fmt.Errorf("batch message %d: %w", i, err)
		}
	}
	body = append(body, "]}"...)
	return body, http.Header{"Content-Type": {batchContentType}}, nil
}

// NewBatchRequest encodes ms with [EncodeBatch] into a request to url whose
// delivery id is the [BatchID] of their ids.
func NewBatchRequest(url string, ms []*Message) (*Request, error) {
	body, h, err := EncodeBatch(ms)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	h.Del("Content-Type")
	return &Request{URL: url, Body: body, ContentType: batchContentType, Header: h, DeliveryID: BatchID(ids)}, nil
}

// BatchID names a batch by the delivery ids it holds, in order: a batch
// retried with the same deliveries keeps its id, so endpoints can
// deduplicate batches as they do single deliveries.
func BatchID(ids []string) string {
	h := sha256.New()
	for _, id := range ids {
		h.Write([]byte(id))
		h.Write([]byte{0})
	}
	return "bat_" + hex.EncodeToString(h.Sum(nil)[:12])
}

// BatchResult is what became of each delivery of a batch attempt.
type BatchResult struct {
	// Delivered lists the ids the endpoint accepted, in batch order.
	Delivered []string
	// Failed lists the others, in batch order.
	Failed []string
	// Outcome says what to do with Failed: OutcomeRetry or OutcomeFinal.
	// It is OutcomeSuccess when Failed is empty.
	Outcome Outcome
	// RetryAfter is how long the endpoint asked to wait before retrying
	// Failed: "retry_after" of a partial failure, else the Retry-After
	// header. 0 when it did not say.
	RetryAfter time.Duration
	// Err says why deliveries failed; nil when none did.
	Err error
}

// ParseBatchResponse applies the batch contract (see [Batch]) to a, the
// attempt that sent a batch holding ids, in order. [Client.Deliver] takes
// any 2xx for a success, partial failures included; pass its Result.Last
// here to learn which deliveries still need another batch.
func ParseBatchResponse(a Attempt, ids []string) BatchResult {
	all := append([]string(nil), ids...)
	switch o := Classify(a); o {
	case OutcomeRetry, OutcomeFinal:
		return BatchResult{Failed: all, Outcome: o, RetryAfter: a.RetryAfter, Err: attemptError(a)}
	}

	failed, retryAfter, err := parseFailed(a)
	if err != nil {
		return BatchResult{Failed: all, Outcome: OutcomeRetry, RetryAfter: a.RetryAfter, Err: err}
	}
	if len(failed) == 0 {
		return BatchResult{Delivered: all, Outcome: OutcomeSuccess}
	}
	if retryAfter == 0 {
		retryAfter = a.RetryAfter
	}
	res := BatchResult{Outcome: OutcomeRetry, RetryAfter: retryAfter}
	for _, id := range ids {
		if failed[id] {
			res.Failed = append(res.Failed, id)
		} else {
			res.Delivered = append(res.Delivered, id)
		}
	}
	if len(res.Failed) == 0 {
		// Only unknown ids were listed: nothing of this batch failed.
		return BatchResult{Delivered: all, Outcome: OutcomeSuccess}
	}
	res.Err = fmt.Errorf("webhooks: endpoint reported %d of %d deliveries failed", len(res.Failed), len(ids))
	return res
}

// errBatchResponse is wrapped when a 2xx batch response claims failures in
// a form that cannot be read.
var errBatchResponse = errors.New("webhooks: unreadable batch response")

// parseFailed reads the "failed" and "retry_after" members of a 2xx batch
// response. It returns no ids when the body does not follow the
// partial-failure form, and an error when it follows it in a way that
// cannot be read.
func parseFailed(a Attempt) (map[string]bool, time.Duration, error) {
	if a.BodyTruncated {
		if bytes.Contains(a.Body, []byte(`"failed"`)) {
			return nil, 0, fmt.Errorf("%w: the body was cut at %d bytes; raise the maximum response size", errBatchResponse, len(a.Body))
		}
		return nil, 0, nil
	}
	var raw map[string]json.RawMessage
	if json.Unmarshal(a.Body, &raw) != nil {
		return nil, 0, nil // not a JSON object: plain success
	}
	rawFailed, ok := raw["failed"]
	if !ok {
		return nil, 0, nil
	}
	var list []string
	if err := json.Unmarshal(rawFailed, &list); err != nil {
		return nil, 0, fmt.Errorf(`%w: "failed" must be an array of delivery ids`, errBatchResponse)
	}
	failed := make(map[string]bool, len(list))
	for _, id := range list {
		failed[id] = true
	}
	var seconds float64
	if rawRA, ok := raw["retry_after"]; ok && json.Unmarshal(rawRA, &seconds) == nil {
		return failed, secondsDuration(seconds), nil
	}
	return failed, 0, nil
}

// secondsDuration converts a number of seconds from an endpoint into a
// duration: 0 for a negative or NaN value, and at most what a Retry-After
// header can say; the retry policy caps it further.
func secondsDuration(s float64) time.Duration {
	switch {
	case !(s > 0):
		return 0
	case s >= float64(maxRetryAfterSeconds):
		return time.Duration(maxRetryAfterSeconds) * time.Second
	}
	return time.Duration(s * float64(time.Second))
}
