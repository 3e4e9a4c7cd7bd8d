package subscription

import "time"

// Limits of dead-letter listing and redrive.
const (
	// DefaultDeadLetterLimit is the page size of a dead-letter listing
	// that names none.
	DefaultDeadLetterLimit = 100
	// MaxDeadLetterLimit is the largest page of a dead-letter listing.
	MaxDeadLetterLimit = 1000
	// MaxRedriveIDs is the most dead letters one redrive may name.
	MaxRedriveIDs = 1000
	// DeadLetterValueExcerpt is how much of a dead letter's value a
	// listing carries: enough to see what an endpoint refused, while a
	// page of large records stays a few MiB.
	DeadLetterValueExcerpt = 8 << 10
)

// DeadLetter is one record of a subscription's dead-letter topic: a
// delivery that ended without success, with why.
type DeadLetter struct {
	// ID is the delivery id (the webhook-id the endpoint saw); redrive
	// names dead letters by it.
	ID string `json:"id"`
	// Topic, Partition and Offset name the source record.
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	// DeadLetterTopic and DeadLetterOffset name the dead-letter record.
	DeadLetterTopic  string `json:"dead_letter_topic"`
	DeadLetterOffset int64  `json:"dead_letter_offset"`
	// Key is the record key when it is printable text, else KeyBase64 is
	// its standard base64; both are empty for a record without a key.
	Key       string `json:"key,omitempty"`
	KeyBase64 string `json:"key_base64,omitempty"`
	// Status is the HTTP status of the last attempt, 0 when no response
	// arrived.
	Status int `json:"status"`
	// Error says why the last attempt got no response, if it got none.
	Error string `json:"error,omitempty"`
	// Attempts counts the attempts made.
	Attempts     int       `json:"attempts"`
	FirstAttempt time.Time `json:"first_attempt"`
	LastAttempt  time.Time `json:"last_attempt"`
	// Headers are the source record's own headers, as text.
	Headers map[string]string `json:"headers,omitempty"`
	// Value is the first DeadLetterValueExcerpt bytes of the record value
	// when they are UTF-8 text, else ValueBase64 is their standard base64.
	// ValueSize is the whole value's length; ValueTruncated says the
	// excerpt is shorter. A value too large for the dead-letter topic was
	// dropped there (ValueDropped), and only its size is known.
	Value          string `json:"value,omitempty"`
	ValueBase64    string `json:"value_base64,omitempty"`
	ValueSize      int    `json:"value_size"`
	ValueTruncated bool   `json:"value_truncated,omitempty"`
	ValueDropped   bool   `json:"value_dropped,omitempty"`
}

// DeadLetterPage is one page of a subscription's dead letters, oldest
// first.
type DeadLetterPage struct {
	// Items is never nil.
	Items []DeadLetter `json:"items"`
	// NextCursor continues after the last item; "" when there is nothing
	// more.
	NextCursor string `json:"next_cursor,omitempty"`
}
