package subscription

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keyhook/keyhook/webhooks"
)

func TestValidateRefusesWhatWouldBePrintedOrSentRaw(t *testing.T) {
	const control = "must not contain control characters (such as ESC, CR, LF or NUL)"
	tests := []struct {
		name   string
		change func(s *Subscription)
		want   []FieldError
	}{
		{"name with ESC", func(s *Subscription) { s.Name = "\x1b[2J" }, []FieldError{{"name", control}}},
		{"name with CR LF", func(s *Subscription) { s.Name = "a\r\nb" }, []FieldError{{"name", control}}},
		{"name with NUL", func(s *Subscription) { s.Name = "a\x00" }, []FieldError{{"name", control}}},
		{"name with DEL", func(s *Subscription) { s.Name = "a\x7f" }, []FieldError{{"name", control}}},
		{"name with a C1 control", func(s *Subscription) { s.Name = "a\u0085" }, []FieldError{{"name", control}}},
		{"name with a bidi override", func(s *Subscription) { s.Name = "a\u202eb" },
			[]FieldError{{"name", "must not contain bidirectional formatting characters or line separators"}}},
		{"name with a line separator", func(s *Subscription) { s.Name = "a\u2028b" },
			[]FieldError{{"name", "must not contain bidirectional formatting characters or line separators"}}},
		{"name in any script", func(s *Subscription) { s.Name = "commandes → facturation 請求 🧾" }, nil},
		{"content type with CR LF", func(s *Subscription) { s.ContentType = "text/plain\r\nX: 1" }, []FieldError{{"content_type", control}}},
		{"content type not a media type", func(s *Subscription) { s.ContentType = "json" },
			[]FieldError{{"content_type", "must be a media type such as application/json"}}},
		{"content type with parameters", func(s *Subscription) { s.ContentType = "application/json; charset=utf-8" }, nil},
		{"cloudevents type with LF", func(s *Subscription) { s.CloudEventsType = "a\nb" }, []FieldError{{"cloudevents_type", control}}},
		{"topic internal to Kafka", func(s *Subscription) { s.Topics = []string{"orders", "__consumer_offsets"} },
			[]FieldError{{"topics[1]", `must not be a Kafka internal topic (one starting with "__")`}}},
		{"topic with one leading underscore", func(s *Subscription) { s.Topics = []string{"_schemas"} }, nil},
		{"dead-letter topic internal to Kafka", func(s *Subscription) { s.DeadLetterTopic = "__transaction_state" },
			[]FieldError{{"dead_letter_topic", `must not be a Kafka internal topic (one starting with "__")`}}},
		{"retry budget beyond 30 days", func(s *Subscription) { s.Retry.MaxElapsedMS = 18446744073710 },
			[]FieldError{{"retry.max_elapsed_ms", "must be between 0 (unlimited) and 2592000000"}}},
		{"retry budget of 30 days", func(s *Subscription) { s.Retry.MaxElapsedMS = MaxRetryElapsedMS }, nil},
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

func TestPolicyNeverWrapsARetryBudget(t *testing.T) {
	defaults := webhooks.RetryPolicy{MaxElapsed: time.Hour}
	for _, ms := range []int64{18446744073710, 1 << 62} {
		got := RetryPolicy{MaxElapsedMS: ms}.Policy(defaults)
		if got.MaxElapsed != time.Hour {
			t.Errorf("max_elapsed_ms %d gave a budget of %v, want the default kept (Validate refuses it)", ms, got.MaxElapsed)
		}
	}
	if got := (RetryPolicy{MaxElapsedMS: MaxRetryElapsedMS}).Policy(defaults); got.MaxElapsed != 30*24*time.Hour {
		t.Errorf("30 days gave %v", got.MaxElapsed)
	}
}

func TestValidateAgainstKeepsReadAndDeadLetteredTopicsApart(t *testing.T) {
	others := []*Subscription{
		{ID: "sub_orders", Topics: []string{"orders"}, DeadLetterTopic: "orders.failed"},
		{ID: "sub_payments", Topics: []string{"payments", "refunds"}},
		{ID: "sub_quiet", Topics: []string{"audit"}, DeadLetterTopic: DeadLetterNone},
	}
	tests := []struct {
		name string
		sub  Subscription
		want []string
	}{
		{"unrelated", Subscription{Topics: []string{"x"}, DeadLetterTopic: "x.failed"}, nil},
		{"default dead-letter topic", Subscription{Topics: []string{"x"}}, nil},
		{"reads another's default dead-letter topic", Subscription{Topics: []string{"payments.keyhook.dlq"}}, nil},
		{"dead-letters into a topic another reads", Subscription{Topics: []string{"x"}, DeadLetterTopic: "refunds"}, []string{"dead_letter_topic"}},
		{"reads another's dead-letter topic", Subscription{Topics: []string{"x", "orders.failed"}}, []string{"topics[1]"}},
		{"closes a loop", Subscription{Topics: []string{"orders.failed"}, DeadLetterTopic: "orders"}, []string{"topics[0]", "dead_letter_topic"}},
		{"itself, changed, is not another", Subscription{ID: "sub_orders", Topics: []string{"orders", "orders2"}, DeadLetterTopic: "orders.failed"}, nil},
		{"none is not a topic", Subscription{Topics: []string{"none"}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, fe := range tt.sub.ValidateAgainst(others) {
				if fe.Message == "" || !strings.Contains(fe.Message, "sub_") {
					t.Errorf("%s: message %q does not name the other subscription", fe.Field, fe.Message)
				}
				got = append(got, fe.Field)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ValidateAgainst fields (-want +got):\n%s", diff)
			}
		})
	}
}
