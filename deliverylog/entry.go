package deliverylog

import (
	"strings"
	"time"
	"unicode/utf8"
)

// DefaultBodyBytes bounds the excerpt of a response body kept.
const DefaultBodyBytes = 1024

// Attempt is one attempt of a delivery as the log keeps it.
type Attempt struct {
	// Number counts the attempts of the delivery from 1 (a redelivery
	// after a takeover counts again from 1).
	Number int `json:"attempt"`
	// Time is when it began.
	Time time.Time `json:"time"`
	// Status is the HTTP status, absent when no response came.
	Status int `json:"status,omitempty"`
	// LatencyMS is how long it took, body read included.
	LatencyMS float64 `json:"latency_ms"`
	// Result is "delivered", "retry" (another attempt follows) or
	// "failed" (the last of its round: dead-lettered, or the key blocked).
	Result string `json:"result"`
	// Error says why no response came.
	Error string `json:"error,omitempty"`
	// Body is the start of the response body as text (invalid UTF-8
	// replaced), at most the Writer's BodyBytes; BodyTruncated reports
	// that there was more.
	Body          string `json:"body,omitempty"`
	BodyTruncated bool   `json:"body_truncated,omitempty"`
	// Headers are the response headers kept: Content-Type, Retry-After.
	Headers map[string]string `json:"headers,omitempty"`
}

// The values of Attempt.Result.
const (
	ResultDelivered = "delivered"
	ResultRetry     = "retry"
	ResultFailed    = "failed"
)

// Failed reports whether the attempt did not deliver.
func (a *Attempt) Failed() bool { return a.Result != ResultDelivered }

// Entry is one attempt handed to the Writer, with what it belongs to.
type Entry struct {
	Subscription string
	DeliveryID   string
	Topic        string
	Partition    int32
	Offset       int64
	Attempt      Attempt
}

// stored is an attempt as one element of a delivery's list: the attempt
// and the record it delivers.
type stored struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Attempt
}

// Excerpt is the first max bytes of body as text, cut at a character
// boundary, invalid UTF-8 replaced; cut reports that body was longer.
func Excerpt(body []byte, max int) (text string, cut bool) {
	if len(body) > max {
		body, cut = body[:max], true
		// Back off to the start of a character.
		for i := 0; i < utf8.UTFMax && len(body) > 0 && !utf8.Valid(body); i++ {
			body = body[:len(body)-1]
		}
	}
	if utf8.Valid(body) {
		return string(body), cut
	}
	return strings.ToValidUTF8(string(body), "\uFFFD"), cut
}
