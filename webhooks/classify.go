package webhooks

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Outcome is what the caller should do after an attempt or a delivery.
type Outcome int

const (
	// OutcomeSuccess: the endpoint accepted the request (2xx); ack it.
	OutcomeSuccess Outcome = iota + 1
	// OutcomeRetry: try again later. For a [Result] it means the context
	// ended before the delivery did: the caller must not ack.
	OutcomeRetry
	// OutcomeFinal: retrying cannot help; dead-letter the record.
	OutcomeFinal
)

// String returns "success", "retry" or "final", for logs and metric labels.
func (o Outcome) String() string {
	switch o {
	case OutcomeSuccess:
		return "success"
	case OutcomeRetry:
		return "retry"
	case OutcomeFinal:
		return "final"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Classify is the one place that decides whether an attempt succeeded,
// should be retried or is final.
//
// When the endpoint answered, its status decides: 2xx succeed; 408, 425, 429
// and 5xx are retried; every other status (1xx, a 3xx the client did not
// follow, other 4xx) is final.
//
// When no response arrived, a forbidden address, an unusable URL
// ([ErrInvalidURL]), a request refused before sending ([ErrInvalidRequest])
// or a refused redirect ([ErrRedirectRefused]) is final; everything else is
// retried: timeouts, refused or reset connections, unexpected EOF, DNS
// failures, TLS failures, and cancellation of the caller's context, so that
// a record is never dead-lettered because the node is shutting down.
func Classify(a Attempt) Outcome {
	if a.Status != 0 {
		return classifyStatus(a.Status)
	}
	var fa *ErrForbiddenAddress
	if errors.As(a.Err, &fa) || errors.Is(a.Err, ErrInvalidURL) ||
		errors.Is(a.Err, ErrInvalidRequest) || errors.Is(a.Err, ErrRedirectRefused) {
		return OutcomeFinal
	}
	// Unknown errors retry: a transient fault dead-lettered is a record
	// lost to the happy path, while a permanent one retried only costs the
	// budget the operator chose.
	return OutcomeRetry
}

func classifyStatus(status int) Outcome {
	switch {
	case status >= 200 && status <= 299:
		return OutcomeSuccess
	case status == http.StatusRequestTimeout,
		status == http.StatusTooEarly,
		status == http.StatusTooManyRequests,
		status >= 500 && status <= 599:
		return OutcomeRetry
	}
	return OutcomeFinal
}

// maxRetryAfterSeconds keeps the conversion to time.Duration from
// overflowing; any wait that long is capped by the retry policy anyway.
const maxRetryAfterSeconds = math.MaxInt64 / int64(time.Second)

// ParseRetryAfter parses a Retry-After header value, in either delta-seconds
// ("120") or HTTP-date form, relative to now. It returns 0 for an empty,
// negative, past or unparsable value, and never a negative duration.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if isDigits(v) {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n > maxRetryAfterSeconds {
			// Only digits, so the one possible error is overflow: the
			// endpoint asked for a very long wait.
			n = maxRetryAfterSeconds
		}
		return time.Duration(n) * time.Second
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	if d := t.Sub(now); d > 0 {
		return d
	}
	return 0
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
