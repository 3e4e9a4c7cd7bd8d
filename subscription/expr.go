package subscription

import (
	"errors"

	"github.com/keyhook/keyhook/recordexpr"
)

// What a record whose filter fails to evaluate becomes (OnFilterError).
const (
	// OnFilterErrorDeliver delivers it, as if the filter had passed it:
	// a filter that cannot decide never drops a record.
	OnFilterErrorDeliver = "deliver"
	// OnFilterErrorDeadLetter dead-letters it with the error as the
	// reason (keyhook-last-error).
	OnFilterErrorDeadLetter = "dead_letter"
)

// RecordSpec is what the subscription says about its records' decoding,
// filter and transform.
func (s *Subscription) RecordSpec() recordexpr.Spec {
	return recordexpr.Spec{Filter: s.Filter, Transform: s.Transform,
		ValueFormat: recordexpr.Format(s.ValueFormat), KeyFormat: recordexpr.Format(s.KeyFormat)}
}

// NeedsSchemaRegistry names the fields ("value_format", "key_format") whose
// format is decoded with schemas from a Schema Registry: a node must have
// one (--schema-registry-url) to accept the subscription.
func (s *Subscription) NeedsSchemaRegistry() []string {
	var fields []string
	if recordexpr.NeedsRegistry(recordexpr.Format(s.ValueFormat)) {
		fields = append(fields, "value_format")
	}
	if recordexpr.NeedsRegistry(recordexpr.Format(s.KeyFormat)) {
		fields = append(fields, "key_format")
	}
	return fields
}

// validateRecordExpr checks the formats and compiles the expressions:
// a filter or transform that does not type-check, or may cost too much,
// is refused with CEL's message and position.
func (s *Subscription) validateRecordExpr(add func(field, msg string)) {
	ok := true
	for _, f := range []struct{ field, value string }{{"value_format", s.ValueFormat}, {"key_format", s.KeyFormat}} {
		if !recordexpr.Known(recordexpr.Format(f.value)) {
			add(f.field, `must be one of "bytes", "json", "avro", "protobuf", "json_schema"`)
			ok = false
		}
	}
	switch s.OnFilterError {
	case "", OnFilterErrorDeliver, OnFilterErrorDeadLetter:
	default:
		add("on_filter_error", `must be one of "deliver", "dead_letter"`)
	}
	if !ok {
		return
	}
	if s.Batch.Enabled() {
		// A batch renders its records together; shaping one of them can
		// fail, and that record alone must be dead-lettered.
		switch {
		case s.Transform != "":
			add("transform", "cannot be used with batch yet")
			return
		case s.ValueFormat != "" && s.ValueFormat != string(recordexpr.FormatBytes):
			add("value_format", `"`+s.ValueFormat+`" cannot be used with batch yet`)
			return
		case s.OnFilterError == OnFilterErrorDeadLetter:
			add("on_filter_error", `"dead_letter" cannot be used with batch yet`)
			return
		}
	}
	if _, err := recordexpr.Compile(s.RecordSpec()); err != nil {
		var e *recordexpr.Error
		if errors.As(err, &e) {
			add(e.Field, e.Message)
			return
		}
		add("filter", err.Error())
	}
}
