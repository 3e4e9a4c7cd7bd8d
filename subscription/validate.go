package subscription

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits enforced by Validate.
const (
	// MaxNameLength is the longest name, in characters (runes).
	MaxNameLength = 200
	// MaxTopics is the most topics one subscription may read.
	MaxTopics = 100
	// MaxTopicLength is Kafka's limit on a topic name, in bytes.
	MaxTopicLength = 249
	// MaxURLLength is the longest endpoint URL, in bytes.
	MaxURLLength = 2048
	// MaxMaxInFlight is the largest max_in_flight.
	MaxMaxInFlight = 100000
	// MaxTimeoutMS is the longest endpoint.timeout_ms (10 minutes).
	MaxTimeoutMS = 600000
)

// FieldError is one problem with one field of a subscription. Field is the
// field's JSON path as a client wrote it, such as "endpoint.url" or
// "topics[1]"; Message says what is wrong in words meant for that client.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Error returns "field: message", so a FieldError can travel as an error.
func (e FieldError) Error() string { return e.Field + ": " + e.Message }

// ValidationError is returned by Store.Create for a subscription that
// fails Validate. It lists every problem found.
type ValidationError struct {
	Errors []FieldError
}

// Error joins the field errors into one line.
func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Errors))
	for i, fe := range e.Errors {
		parts[i] = fe.Error()
	}
	return "subscription: invalid: " + strings.Join(parts, "; ")
}

// Normalize fills the fields a client may leave empty with their defaults:
// ordering "key", sharing "auto", max_in_flight 256 and start "earliest". Fields with a
// value, valid or not, are left alone so that Validate can report them.
func (s *Subscription) Normalize() {
	if s.Ordering == "" {
		s.Ordering = OrderKey
	}
	if s.Sharing == "" {
		s.Sharing = SharingAuto
	}
	if s.MaxInFlight == 0 {
		s.MaxInFlight = DefaultMaxInFlight
	}
	if s.Start == "" {
		s.Start = StartEarliest
	}
}

// Validate returns every problem found in the subscription's user-settable
// fields, in field order, or nil when there is none. It checks the
// normalized form: call Normalize first, or empty ordering, max_in_flight
// and start are reported. The endpoint URL is checked as text only; no
// name is resolved and no address dialled.
func (s *Subscription) Validate() []FieldError {
	var errs []FieldError
	add := func(field, msg string) { errs = append(errs, FieldError{Field: field, Message: msg}) }

	switch {
	case strings.TrimSpace(s.Name) == "":
		add("name", "is required")
	case utf8.RuneCountInString(s.Name) > MaxNameLength:
		add("name", fmt.Sprintf("must be at most %d characters", MaxNameLength))
	case textProblem(s.Name) != "":
		add("name", textProblem(s.Name))
	}

	switch {
	case len(s.Topics) == 0:
		add("topics", "must list at least one topic")
	case len(s.Topics) > MaxTopics:
		add("topics", fmt.Sprintf("must list at most %d topics", MaxTopics))
	}
	first := make(map[string]int, len(s.Topics))
	for i, t := range s.Topics {
		field := "topics[" + strconv.Itoa(i) + "]"
		if msg := topicNameProblem(t); msg != "" {
			add(field, msg)
			continue
		}
		if internalTopic(t) {
			add(field, `must not be a Kafka internal topic (one starting with "__")`)
			continue
		}
		if j, dup := first[t]; dup {
			add(field, fmt.Sprintf("duplicates topics[%d]", j))
			continue
		}
		first[t] = i
	}

	if msg := endpointURLProblem(s.Endpoint.URL); msg != "" {
		add("endpoint.url", msg)
	}
	if s.Endpoint.TimeoutMS < 0 || s.Endpoint.TimeoutMS > MaxTimeoutMS {
		add("endpoint.timeout_ms", fmt.Sprintf("must be between 0 (node default) and %d", MaxTimeoutMS))
	}

	if msg := disableAfterProblem(s.DisableAfter); msg != "" {
		add("disable_after", msg)
	}

	switch s.Ordering {
	case OrderKey, OrderPartition, OrderNone:
	default:
		add("ordering", `must be one of "key", "partition", "none"`)
	}
	switch s.Sharing {
	case "", SharingAuto, SharingOff:
	default:
		add("sharing", `must be one of "auto", "off"`)
	}
	if s.Conflate && s.Ordering != OrderKey {
		add("conflate", `needs ordering "key": it keeps each key's newest record`)
	}
	if s.MaxInFlight < 1 || s.MaxInFlight > MaxMaxInFlight {
		add("max_in_flight", fmt.Sprintf("must be between 1 and %d", MaxMaxInFlight))
	}
	switch s.Start {
	case StartEarliest, StartLatest:
	default:
		add("start", `must be one of "earliest", "latest"`)
	}

	s.validateDelivery(add)
	s.RateLimit.validate(add)
	s.validateRecordExpr(add)

	switch dlt := s.DeadLetterTopic; {
	case dlt == "" || dlt == DeadLetterNone:
	case topicNameProblem(dlt) != "":
		add("dead_letter_topic", `must be empty (default), "none", or a topic name: `+topicNameProblem(dlt))
	case internalTopic(dlt):
		// Writing into __consumer_offsets or __transaction_state
		// corrupts the cluster's own bookkeeping.
		add("dead_letter_topic", `must not be a Kafka internal topic (one starting with "__")`)
	default:
		// Dead-lettering into a topic the subscription reads would feed
		// failed records back to the endpoint that refused them, forever.
		if _, loop := first[dlt]; loop {
			add("dead_letter_topic", "must not be one of the subscription's topics")
		}
	}
	return errs
}

// ValidateAgainst returns the problems of s's topics and dead-letter
// topic that only the other stored subscriptions reveal, in field order,
// or nil. s itself, by ID, is skipped among others.
//
// No topic may be both read by a subscription and written by another's
// dead-lettering: records failed by one endpoint would be delivered to
// another, and two subscriptions dead-lettering into each other's topics
// loop forever. So an explicit dead_letter_topic must be a topic no
// subscription reads, and a subscription must not read a topic that
// another names as its dead_letter_topic. The default
// "<topic>.keyhook.dlq" is not counted: each default adds a suffix, so a
// chain of defaults never comes back to where it started, and reading a
// default dead-letter topic with another subscription is how dead letters
// are processed elsewhere.
func (s *Subscription) ValidateAgainst(others []*Subscription) []FieldError {
	var errs []FieldError
	readers := make(map[string]string)
	dlts := make(map[string]string)
	for _, o := range others {
		if o == nil || o.ID == s.ID && s.ID != "" {
			continue
		}
		for _, t := range o.Topics {
			if _, seen := readers[t]; !seen {
				readers[t] = o.ID
			}
		}
		if explicitDeadLetterTopic(o.DeadLetterTopic) {
			if _, seen := dlts[o.DeadLetterTopic]; !seen {
				dlts[o.DeadLetterTopic] = o.ID
			}
		}
	}
	for i, t := range s.Topics {
		if id, ok := dlts[t]; ok {
			errs = append(errs, FieldError{Field: "topics[" + strconv.Itoa(i) + "]",
				Message: fmt.Sprintf("is the dead-letter topic of subscription %s: a topic is either read or dead-lettered into, never both, so that dead letters never loop", id)})
		}
	}
	if dlt := s.DeadLetterTopic; explicitDeadLetterTopic(dlt) {
		if id, ok := readers[dlt]; ok {
			errs = append(errs, FieldError{Field: "dead_letter_topic",
				Message: fmt.Sprintf("is read by subscription %s: its dead letters would be delivered again, and can loop", id)})
		}
	}
	return errs
}

// disableAfterProblem says what is wrong with a disable_after, "" when
// nothing is.
func disableAfterProblem(v string) string {
	if v == "" {
		return ""
	}
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		return fmt.Sprintf("must be a duration such as \"24h\" or \"90m\" (units h, m, s), not %q", v)
	case d == 0:
		return ""
	case d < MinDisableAfter:
		return fmt.Sprintf("must be 0 (off) or at least %v", MinDisableAfter)
	}
	return ""
}

func explicitDeadLetterTopic(dlt string) bool { return dlt != "" && dlt != DeadLetterNone }

// internalTopic reports whether name is reserved for Kafka itself, such
// as __consumer_offsets and __transaction_state.
func internalTopic(name string) bool { return strings.HasPrefix(name, "__") }

// textProblem says why s, a free text that keyhook prints (CLI tables,
// logs) or sends (request headers), cannot be taken, or "" if it can.
// Control characters (C0 such as ESC, CR, LF and NUL, DEL, C1) would
// inject terminal escapes, fake table rows or header lines; bidirectional
// formatting characters and line separators would reorder or break what
// an operator reads.
func textProblem(s string) string {
	for _, r := range s {
		switch {
		case unicode.IsControl(r):
			return "must not contain control characters (such as ESC, CR, LF or NUL)"
		case unicode.Is(unicode.Bidi_Control, r), unicode.In(r, unicode.Zl, unicode.Zp):
			return "must not contain bidirectional formatting characters or line separators"
		}
	}
	return ""
}

// topicNameProblem says what makes name an invalid Kafka topic name, or ""
// if it is valid. The rules are Kafka's own (1 to 249 characters of
// [a-zA-Z0-9._-], not "." or ".."), so a subscription never names a topic
// the broker would refuse to create.
func topicNameProblem(name string) string {
	switch {
	case name == "":
		return "must not be empty"
	case len(name) > MaxTopicLength:
		return fmt.Sprintf("must be at most %d characters", MaxTopicLength)
	case name == "." || name == "..":
		return `must not be "." or ".."`
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return "may contain only ASCII letters, digits, '.', '_' and '-'"
		}
	}
	return ""
}

// endpointURLProblem says what makes raw unusable as an endpoint URL, or ""
// if it is usable.
func endpointURLProblem(raw string) string {
	if raw == "" {
		return "is required"
	}
	if len(raw) > MaxURLLength {
		return fmt.Sprintf("must be at most %d characters", MaxURLLength)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "must be a valid URL"
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "must be an absolute http or https URL"
	}
	if u.Opaque != "" || u.Hostname() == "" {
		return "must name a host"
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "must have a port from 1 to 65535"
		}
	}
	// Credentials in the URL would be stored and shown in clear text;
	// endpoints authenticate through the signature headers instead.
	if u.User != nil {
		return "must not contain user information"
	}
	return ""
}
