package api

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

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

// Header names of a test delivery, as a real delivery sends them, plus
// HeaderTest.
const (
	headerSubscription = "Keyhook-Subscription"
	headerKey          = "Keyhook-Key"
	headerKeyBase64    = "Keyhook-Key-Base64"
	headerTimestamp    = "Keyhook-Timestamp"
	// HeaderTest marks a test delivery, with value "true".
	HeaderTest = "Keyhook-Test"
)

// TestRequest is the optional body of a test delivery.
type TestRequest struct {
	// Value is the JSON sent as the body. Default:
	// {"keyhook":"test","subscription":"<id>"}.
	Value json.RawMessage `json:"value,omitempty"`
	// Key is sent as the record key; none when nil.
	Key *string `json:"key,omitempty"`
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
	// forbidden address...), "" when one did.
	Error string `json:"error,omitempty"`
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
}

// NewWebhookTester returns a tester sending through sender.
func NewWebhookTester(sender Sender) (*WebhookTester, error) {
	if sender == nil {
		return nil, errors.New("api: NewWebhookTester: sender is required")
	}
	return &WebhookTester{sender: sender, now: time.Now}, nil
}

// Test sends one attempt, never retried, bounded by the subscription's
// endpoint timeout when it sets one (the sender's otherwise), and
// reports the outcome.
func (t *WebhookTester) Test(ctx context.Context, sub *subscription.Subscription, req TestRequest) (*TestResult, error) {
	body := []byte(req.Value)
	if len(body) == 0 {
		var err error
		body, err = json.Marshal(map[string]string{"keyhook": "test", "subscription": sub.ID})
		if err != nil {
			return nil, err
		}
	}
	h := make(http.Header)
	h.Set(headerSubscription, sub.ID)
	h.Set(HeaderTest, "true")
	h.Set(headerTimestamp, t.now().UTC().Format(time.RFC3339Nano))
	if req.Key != nil {
		if headerSafe(*req.Key) {
			h.Set(headerKey, *req.Key)
		} else {
			h.Set(headerKeyBase64, base64.StdEncoding.EncodeToString([]byte(*req.Key)))
		}
	}
	if sub.Endpoint.TimeoutMS > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(sub.Endpoint.TimeoutMS)*time.Millisecond)
		defer cancel()
	}
	id := newTestDeliveryID()
	a := t.sender.Send(ctx, &webhooks.Request{
		URL: sub.Endpoint.URL, Body: body, ContentType: mediaJSON, Header: h, DeliveryID: id,
	}, 1)
	res := &TestResult{
		DeliveryID: id,
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

func newTestDeliveryID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // never fails: crypto/rand ends the program instead
	return TestDeliveryIDPrefix + hex.EncodeToString(b[:])
}

// headerSafe reports whether s can travel as a header value unchanged:
// valid UTF-8 without control characters.
func headerSafe(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < ' ' && r != '\t' || r == 0x7f {
			return false
		}
	}
	return true
}
