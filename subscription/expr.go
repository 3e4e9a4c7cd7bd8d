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

// validateRecordExpr checks the formats and compiles the expressions:
// a filter or transform that does not type-check, or may cost too much,
// is refused with CEL's message and position.
func (s *Subscription) validateRecordExpr(add func(field, msg string)) {
	ok := true
	for _, f := range []struct{ field, value string }{{"value_format", s.ValueFormat}, {"key_format", s.KeyFormat}} {
		switch v := recordexpr.Format(f.value); {
		case !recordexpr.Known(v):
			add(f.field, `must be one of "bytes", "json"`)
			ok = false
		case !recordexpr.Supported(v):
			add(f.field, `"`+f.value+`" is not supported yet: use "bytes" or "json"`)
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
		case s.ValueFormat == string(recordexpr.FormatJSON):
			add("value_format", `"json" cannot be used with batch yet`)
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
