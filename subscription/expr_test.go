package subscription

import (
	"strings"
	"testing"
)

// TestValidateRecordExpr defends that formats and expressions are checked
// where every create, PUT and PATCH is: the field named, CEL's position
// in the message.
func TestValidateRecordExpr(t *testing.T) {
	cases := []struct {
		edit  func(*Subscription)
		field string
		sub   string
	}{
		{func(s *Subscription) { s.Filter = "key ==" }, "filter", "filter:1:"},
		{func(s *Subscription) { s.Transform = "offset" }, "transform", "must yield a map"},
		{func(s *Subscription) { s.ValueFormat = "xml" }, "value_format", `must be one of "bytes", "json", "avro", "protobuf", "json_schema"`},
		{func(s *Subscription) { s.KeyFormat = "xml" }, "key_format", `must be one of "bytes", "json"`},
		{func(s *Subscription) { s.ValueFormat, s.Batch.MaxRecords = "avro", 10 }, "value_format", `"avro" cannot be used with batch yet`},
		{func(s *Subscription) { s.OnFilterError = "drop" }, "on_filter_error", "must be one of"},
	}
	for _, c := range cases {
		v := validSubscription()
		s := &v
		c.edit(s)
		errs := s.Validate()
		if len(errs) != 1 || errs[0].Field != c.field || !strings.Contains(errs[0].Message, c.sub) {
			t.Errorf("Validate = %+v, want one error on %s containing %q", errs, c.field, c.sub)
		}
	}
	v := validSubscription()
	s := &v
	s.ValueFormat, s.Filter, s.Transform, s.OnFilterError = "json", "value.type == 'order.paid'", `{"id": value.id}`, "dead_letter"
	if errs := s.Validate(); errs != nil {
		t.Errorf("Validate of a good filter = %+v", errs)
	}
	// The registry formats type-check here; whether the node has a
	// registry is the API's to say (NeedsSchemaRegistry).
	s.ValueFormat, s.KeyFormat = "avro", "protobuf"
	if errs := s.Validate(); errs != nil {
		t.Errorf("Validate of avro and protobuf = %+v", errs)
	}
	if got := s.NeedsSchemaRegistry(); strings.Join(got, ",") != "value_format,key_format" {
		t.Errorf("NeedsSchemaRegistry = %v", got)
	}
}
