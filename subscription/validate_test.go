package subscription

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// validSubscription returns a normalized subscription that passes
// Validate; tests change one thing in it at a time.
func validSubscription() Subscription {
	return Subscription{
		Name:        "orders to billing",
		Topics:      []string{"orders", "orders.v2"},
		Endpoint:    Endpoint{URL: "https://billing.example.com/hooks/orders", TimeoutMS: 5000},
		Ordering:    OrderKey,
		MaxInFlight: 256,
		Start:       StartEarliest,
	}
}

func TestNormalizeFillsOnlyEmptyFields(t *testing.T) {
	tests := []struct {
		name string
		in   Subscription
		want Subscription
	}{
		{
			name: "empty fields get defaults",
			in:   Subscription{Name: "n"},
			want: Subscription{Name: "n", Ordering: OrderKey, Sharing: SharingAuto, MaxInFlight: DefaultMaxInFlight, Start: StartEarliest},
		},
		{
			name: "set fields, even invalid ones, are kept for Validate to report",
			in:   Subscription{Ordering: "bogus", MaxInFlight: -1, Start: StartLatest, DeadLetterTopic: "x"},
			want: Subscription{Ordering: "bogus", Sharing: SharingAuto, MaxInFlight: -1, Start: StartLatest, DeadLetterTopic: "x"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.in
			got.Normalize()
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Normalize (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateReportsEveryProblemByField(t *testing.T) {
	const topicRule = "may contain only ASCII letters, digits, '.', '_' and '-'"
	tests := []struct {
		name   string
		change func(s *Subscription)
		want   []FieldError
	}{
		{name: "valid", change: func(*Subscription) {}},
		{name: "valid limits", change: func(s *Subscription) {
			s.Name = strings.Repeat("é", MaxNameLength)
			s.Topics = []string{strings.Repeat("a", MaxTopicLength), "A-Z_0.9"}
			s.Endpoint = Endpoint{URL: "http://127.0.0.1:8080/" + strings.Repeat("p", MaxURLLength-len("http://127.0.0.1:8080/")), TimeoutMS: MaxTimeoutMS}
			s.Ordering, s.MaxInFlight, s.Start = OrderNone, MaxMaxInFlight, StartLatest
			s.DeadLetterTopic = DeadLetterNone
		}},
		{name: "valid partition ordering, min in flight, zero timeout, own dead-letter topic", change: func(s *Subscription) {
			s.Ordering, s.MaxInFlight, s.Endpoint.TimeoutMS, s.DeadLetterTopic = OrderPartition, 1, 0, "orders.failed"
		}},
		{name: "valid 100 topics", change: func(s *Subscription) { s.Topics = numberedTopics(MaxTopics) }},
		{name: "valid rate limit, default burst", change: func(s *Subscription) { s.RateLimit = RateLimit{PerSecond: 50} }},
		{name: "valid rate limit at its bounds", change: func(s *Subscription) {
			s.RateLimit = RateLimit{PerSecond: MaxRateLimitPerSecond, Burst: MaxRateLimitBurst}
		}},
		{name: "rate limit with a burst and no rate", change: func(s *Subscription) { s.RateLimit = RateLimit{Burst: 5} },
			want: []FieldError{{"rate_limit.per_second", "must be between 1 and 100000 when rate_limit is set"}}},
		{name: "rate limit out of range, each field named", change: func(s *Subscription) {
			s.RateLimit = RateLimit{PerSecond: MaxRateLimitPerSecond + 1, Burst: -1}
		}, want: []FieldError{
			{"rate_limit.per_second", "must be between 1 and 100000 when rate_limit is set"},
			{"rate_limit.burst", "must be between 0 (a tenth of per_second) and 100000"},
		}},
		{name: "name missing", change: func(s *Subscription) { s.Name = "" },
			want: []FieldError{{"name", "is required"}}},
		{name: "name blank", change: func(s *Subscription) { s.Name = " \t" },
			want: []FieldError{{"name", "is required"}}},
		{name: "name too long", change: func(s *Subscription) { s.Name = strings.Repeat("x", MaxNameLength+1) },
			want: []FieldError{{"name", "must be at most 200 characters"}}},
		{name: "topics missing", change: func(s *Subscription) { s.Topics = nil },
			want: []FieldError{{"topics", "must list at least one topic"}}},
		{name: "too many topics", change: func(s *Subscription) { s.Topics = numberedTopics(MaxTopics + 1) },
			want: []FieldError{{"topics", "must list at most 100 topics"}}},
		{name: "bad topic names each reported at their index", change: func(s *Subscription) {
			s.Topics = []string{"ok", "", ".", "..", "has space", "ünï", strings.Repeat("t", MaxTopicLength+1), "a/b"}
		}, want: []FieldError{
			{"topics[1]", "must not be empty"},
			{"topics[2]", `must not be "." or ".."`},
			{"topics[3]", `must not be "." or ".."`},
			{"topics[4]", topicRule},
			{"topics[5]", topicRule},
			{"topics[6]", "must be at most 249 characters"},
			{"topics[7]", topicRule},
		}},
		{name: "duplicate topics", change: func(s *Subscription) { s.Topics = []string{"a", "b", "a", "b", "a"} },
			want: []FieldError{
				{"topics[2]", "duplicates topics[0]"},
				{"topics[3]", "duplicates topics[1]"},
				{"topics[4]", "duplicates topics[0]"},
			}},
		{name: "url missing", change: func(s *Subscription) { s.Endpoint.URL = "" },
			want: []FieldError{{"endpoint.url", "is required"}}},
		{name: "url too long", change: func(s *Subscription) {
			s.Endpoint.URL = "https://h.example/" + strings.Repeat("p", MaxURLLength)
		}, want: []FieldError{{"endpoint.url", "must be at most 2048 characters"}}},
		{name: "url unparsable", change: func(s *Subscription) { s.Endpoint.URL = "http://h.example/%zz" },
			want: []FieldError{{"endpoint.url", "must be a valid URL"}}},
		{name: "url relative", change: func(s *Subscription) { s.Endpoint.URL = "/hooks" },
			want: []FieldError{{"endpoint.url", "must be an absolute http or https URL"}}},
		{name: "url scheme not http", change: func(s *Subscription) { s.Endpoint.URL = "ftp://h.example/x" },
			want: []FieldError{{"endpoint.url", "must be an absolute http or https URL"}}},
		{name: "url without host", change: func(s *Subscription) { s.Endpoint.URL = "https:///x" },
			want: []FieldError{{"endpoint.url", "must name a host"}}},
		{name: "url opaque", change: func(s *Subscription) { s.Endpoint.URL = "http:h.example" },
			want: []FieldError{{"endpoint.url", "must name a host"}}},
		{name: "url port only", change: func(s *Subscription) { s.Endpoint.URL = "http://:8080/x" },
			want: []FieldError{{"endpoint.url", "must name a host"}}},
		{name: "url port out of range", change: func(s *Subscription) { s.Endpoint.URL = "https://h.example:65536/x" },
			want: []FieldError{{"endpoint.url", "must have a port from 1 to 65535"}}},
		{name: "url port zero", change: func(s *Subscription) { s.Endpoint.URL = "https://h.example:0/x" },
			want: []FieldError{{"endpoint.url", "must have a port from 1 to 65535"}}},
		{name: "url with user info", change: func(s *Subscription) { s.Endpoint.URL = "https://user:secret@h.example/x" },
			want: []FieldError{{"endpoint.url", "must not contain user information"}}},
		{name: "timeout negative", change: func(s *Subscription) { s.Endpoint.TimeoutMS = -1 },
			want: []FieldError{{"endpoint.timeout_ms", "must be between 0 (node default) and 600000"}}},
		{name: "timeout too long", change: func(s *Subscription) { s.Endpoint.TimeoutMS = MaxTimeoutMS + 1 },
			want: []FieldError{{"endpoint.timeout_ms", "must be between 0 (node default) and 600000"}}},
		{name: "ordering unknown", change: func(s *Subscription) { s.Ordering = "KEY" },
			want: []FieldError{{"ordering", `must be one of "key", "partition", "none"`}}},
		{name: "ordering empty (not normalized)", change: func(s *Subscription) { s.Ordering = "" },
			want: []FieldError{{"ordering", `must be one of "key", "partition", "none"`}}},
		{name: "sharing unknown", change: func(s *Subscription) { s.Sharing = "on" },
			want: []FieldError{{"sharing", `must be one of "auto", "off"`}}},
		{name: "conflate without ordering key", change: func(s *Subscription) { s.Conflate, s.Ordering = true, OrderPartition },
			want: []FieldError{{"conflate", `needs ordering "key": it keeps each key's newest record`}}},
		{name: "max in flight zero (not normalized)", change: func(s *Subscription) { s.MaxInFlight = 0 },
			want: []FieldError{{"max_in_flight", "must be between 1 and 100000"}}},
		{name: "max in flight negative", change: func(s *Subscription) { s.MaxInFlight = -5 },
			want: []FieldError{{"max_in_flight", "must be between 1 and 100000"}}},
		{name: "max in flight too large", change: func(s *Subscription) { s.MaxInFlight = MaxMaxInFlight + 1 },
			want: []FieldError{{"max_in_flight", "must be between 1 and 100000"}}},
		{name: "start unknown", change: func(s *Subscription) { s.Start = "now" },
			want: []FieldError{{"start", `must be one of "earliest", "latest"`}}},
		{name: "dead letter topic invalid", change: func(s *Subscription) { s.DeadLetterTopic = "dlq!" },
			want: []FieldError{{"dead_letter_topic", `must be empty (default), "none", or a topic name: ` + topicRule}}},
		{name: "dead letter topic is a source topic", change: func(s *Subscription) { s.DeadLetterTopic = "orders.v2" },
			want: []FieldError{{"dead_letter_topic", "must not be one of the subscription's topics"}}},
		{name: "everything wrong at once, in field order", change: func(s *Subscription) {
			*s = Subscription{
				Topics:          []string{"ok", "ok"},
				Endpoint:        Endpoint{URL: "gopher://x", TimeoutMS: -1},
				Ordering:        "random",
				MaxInFlight:     -1,
				Start:           "middle",
				DeadLetterTopic: "..",
			}
		}, want: []FieldError{
			{"name", "is required"},
			{"topics[1]", "duplicates topics[0]"},
			{"endpoint.url", "must be an absolute http or https URL"},
			{"endpoint.timeout_ms", "must be between 0 (node default) and 600000"},
			{"ordering", `must be one of "key", "partition", "none"`},
			{"max_in_flight", "must be between 1 and 100000"},
			{"start", `must be one of "earliest", "latest"`},
			{"dead_letter_topic", `must be empty (default), "none", or a topic name: must not be "." or ".."`},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSubscription()
			tt.change(&s)
			if diff := cmp.Diff(tt.want, s.Validate()); diff != "" {
				t.Errorf("Validate (-want +got):\n%s", diff)
			}
		})
	}
}

func numberedTopics(n int) []string {
	ts := make([]string, n)
	for i := range ts {
		ts[i] = "topic-" + strconv.Itoa(i)
	}
	return ts
}

// FuzzDecodeNormalizeValidate defends that no client input, however odd,
// makes the validation path panic, and that what it accepts survives a
// round trip through the stored JSON form.
func FuzzDecodeNormalizeValidate(f *testing.F) {
	seeds := []string{
		`{}`,
		`{"name":"n","topics":["a"],"endpoint":{"url":"https://h.example/x"}}`,
		`{"name":"n","topics":["a","a",""],"endpoint":{"url":"http://[::1]:99999/","timeout_ms":-1},"ordering":"none","max_in_flight":100001,"start":"latest","dead_letter_topic":"none"}`,
		`{"endpoint":{"url":"http://%zz"}}`,
		`{"endpoint":{"url":"http:opaque"}}`,
		`{"topics":null,"endpoint":null}`,
		`{"name":"\u0000\ud800"}`,
		`[]`, `null`, `"x"`, `{"max_in_flight":1e99}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		var s Subscription
		if err := dec.Decode(&s); err != nil {
			return
		}
		s.Normalize()
		errs := s.Validate()
		for _, fe := range errs {
			if fe.Field == "" || fe.Message == "" {
				t.Fatalf("field error without field or message: %+v", fe)
			}
		}
		if len(errs) > 0 {
			return
		}
		b, err := json.Marshal(&s)
		if err != nil {
			t.Fatalf("marshal valid subscription: %v", err)
		}
		var back Subscription
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("unmarshal stored form: %v", err)
		}
		if errs := back.Validate(); len(errs) > 0 {
			t.Fatalf("valid subscription invalid after round trip: %v", errs)
		}
	})
}
