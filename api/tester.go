package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/keyhook/keyhook/delivery"
	"github.com/keyhook/keyhook/recordexpr"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/webhooks"
)

// Limits of test deliveries.
const (
	// MaxTestKeyBytes is the longest key a test delivery may carry.
	MaxTestKeyBytes = 1024
	// TestResponseBodyLimit is how much of the endpoint's answer a test
	// result shows: enough to read an error message, bounded so that an
	// endpoint cannot make the API answer large.
	TestResponseBodyLimit = 4 << 10
	// TestDeliveryIDPrefix starts the delivery id of every test delivery,
	// so endpoints and logs can tell them from real ones.
	TestDeliveryIDPrefix = "test_"
)

// HeaderTest marks a test delivery, with value "true", in every format.
const HeaderTest = "Keyhook-Test"

// TestRequest is the optional body of a test delivery.
type TestRequest struct {
	// Value is the JSON sent as the body. Default:
	// {"keyhook":"test","subscription":"<id>"}.
	Value json.RawMessage `json:"value,omitempty"`
	// ValueBase64, when set, is the record value's bytes instead of Value:
	// a value in the Confluent wire format (Avro, Protobuf, JSON Schema),
	// decoded as the subscription's value_format says.
	ValueBase64 []byte `json:"value_base64,omitempty"`
	// Key is sent as the record key; none when nil.
	Key *string `json:"key,omitempty"`
	// Filter and Transform, when set, replace the subscription's for this
	// test only (nothing is saved), so an expression can be tried before
	// it is; "" removes the subscription's.
	Filter    *string `json:"filter,omitempty"`
	Transform *string `json:"transform,omitempty"`
}

// WithOverrides returns sub with the test's filter and transform in place
// of its own (sub itself when the test sets neither).
func (req TestRequest) WithOverrides(sub *subscription.Subscription) *subscription.Subscription {
	if req.Filter == nil && req.Transform == nil {
		return sub
	}
	c := *sub
	if req.Filter != nil {
		c.Filter = *req.Filter
	}
	if req.Transform != nil {
		c.Transform = *req.Transform
	}
	return &c
}

// TestResult is what a test delivery found.
type TestResult struct {
	// DeliveryID is the webhook-id sent: "test_" and 24 hex digits.
	DeliveryID string `json:"delivery_id"`
	// Success is true when the endpoint answered 2xx, which would have
	// acknowledged a real delivery.
	Success bool `json:"success"`
	// Status is the endpoint's HTTP status, 0 when no response arrived.
	Status int `json:"status"`
	// DurationMS is how long the attempt took, body read included.
	DurationMS int64 `json:"duration_ms"`
	// ResponseBody is the start of the endpoint's response body, at most
	// TestResponseBodyLimit bytes, invalid UTF-8 replaced.
	ResponseBody string `json:"response_body"`
	// ResponseBodyTruncated is true when the body was longer.
	ResponseBodyTruncated bool `json:"response_body_truncated"`
	// Error says why no response arrived (connection refused, timeout,
	// forbidden address...), or why the record could not be delivered
	// (a value that does not decode, a transform that fails), "" when
	// one did.
	Error string `json:"error,omitempty"`
	// Filtered is true when the subscription's filter rejects the test
	// record: a real one would be acked without delivery, so no request
	// was sent.
	Filtered bool `json:"filtered"`
	// Body is the body sent (the transform's result when there is one),
	// invalid UTF-8 replaced, at most TestResponseBodyLimit bytes.
	Body string `json:"body"`
}

// Sender sends one attempt of a webhook; webhooks.Client implements it.
type Sender interface {
	Send(ctx context.Context, r *webhooks.Request, attempt int) webhooks.Attempt
}

// WebhookTester is the Tester that sends through a Sender: the node's
// webhooks.Client, so a test goes through the same address policy
// (checked at dial time), timeouts and body limits as a real delivery.
type WebhookTester struct {
	sender Sender
	now    func() time.Time
	opts   []recordexpr.Option
}

// NewWebhookTester returns a tester sending through sender; opts are the
// node's for decoding (recordexpr.WithSchemas, its Schema Registry).
func NewWebhookTester(sender Sender, opts ...recordexpr.Option) (*WebhookTester, error) {
	if sender == nil {
		return nil, errors.New("api: NewWebhookTester: sender is required")
	}
	return &WebhookTester{sender: sender, now: time.Now, opts: opts}, nil
}

// Test sends one attempt, never retried, rendered as a real delivery of
// the subscription is (its format, signature, credentials, timeout and
// redirect allowance), with a test_ delivery id and Keyhook-Test: true,
// and reports the outcome.
func (t *WebhookTester) Test(ctx context.Context, sub *subscription.Subscription, req TestRequest) (*TestResult, error) {
	m, err := t.message(sub, req)
	if err != nil {
		return nil, err
	}
	ep := delivery.New(sub, webhooks.RetryPolicy{}, t.opts...)
	rec := recordexpr.Record{Key: m.Key, Value: m.Value, Timestamp: m.Time, Headers: func(func(string, []byte) bool) {}}
	if len(sub.Topics) > 0 {
		rec.Topic = sub.Topics[0]
	}
	// A test may wait for the registry (the request's deadline bounds
	// it); a record in a partition never does.
	if err := ep.Wait(ctx, &rec); err != nil {
		return &TestResult{DeliveryID: m.ID, Error: err.Error()}, nil
	}
	pass, err := ep.Filter(&rec)
	switch {
	case err != nil && (sub.OnFilterError == subscription.OnFilterErrorDeadLetter || recordexpr.IsDecode(err)):
		return &TestResult{DeliveryID: m.ID, Error: err.Error()}, nil
	case err == nil && !pass:
		return &TestResult{DeliveryID: m.ID, Filtered: true}, nil
	}
	if err := ep.Shape(m, &rec); err != nil {
		return &TestResult{DeliveryID: m.ID, Error: err.Error()}, nil
	}
	r, err := ep.Render(m)
	if err != nil {
		// The subscription's format cannot carry this test message: say
		// so as a failed test rather than an API error.
		return &TestResult{DeliveryID: m.ID, Error: err.Error()}, nil
	}
	r.Header.Set(HeaderTest, "true")
	a := t.sender.Send(ctx, r, 1)
	res := &TestResult{
		DeliveryID: m.ID,
		Body:       strings.ToValidUTF8(string(m.Value[:min(len(m.Value), TestResponseBodyLimit)]), "\uFFFD"),
		Success:    webhooks.Classify(a) == webhooks.OutcomeSuccess,
		Status:     a.Status,
		DurationMS: a.Duration.Milliseconds(),
	}
	b := a.Body
	if len(b) > TestResponseBodyLimit {
		b, res.ResponseBodyTruncated = b[:TestResponseBodyLimit], true
	}
	res.ResponseBody = strings.ToValidUTF8(string(b), "\uFFFD")
	if a.Err != nil {
		res.Error = a.Err.Error()
	}
	return res, nil
}

// message is the test delivery as webhooks sees it: a JSON value, with
// the key asked for, from the subscription's first topic.
func (t *WebhookTester) message(sub *subscription.Subscription, req TestRequest) (*webhooks.Message, error) {
	body := []byte(req.Value)
	ct := mediaJSON
	if req.ValueBase64 != nil {
		body, ct = req.ValueBase64, ""
	}
	if len(body) == 0 && req.ValueBase64 == nil {
		var err error
		body, err = json.Marshal(map[string]string{"keyhook": "test", "subscription": sub.ID})
		if err != nil {
			return nil, err
		}
	}
	m := &webhooks.Message{
		ID: newTestDeliveryID(), Value: body, ContentType: ct, Time: t.now(),
		Subject:    "test",
		Attributes: []webhooks.Attr{{Name: "subscription", Value: sub.ID}},
	}
	if len(sub.Topics) > 0 {
		m.Source = "kafka://" + sub.Topics[0]
		m.Attributes = append(m.Attributes, webhooks.Attr{Name: "topic", Value: sub.Topics[0]})
	}
	if req.Key != nil {
		m.Key = []byte(*req.Key)
	}
	return m, nil
}

func newTestDeliveryID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // never fails: crypto/rand ends the program instead
	return TestDeliveryIDPrefix + hex.EncodeToString(b[:])
}
