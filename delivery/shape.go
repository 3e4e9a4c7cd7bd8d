package delivery

import (
	"fmt"

	"github.com/keyhook/keyhook/recordexpr"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/webhooks"
)

// Filters reports whether the subscription filters records: Filter must
// then be asked about each one.
func (e *Endpoint) Filters() bool {
	return e.exprErr != nil || e.expr != nil && e.expr.HasFilter()
}

// Filter reports whether rec is to be delivered: true without a filter.
// Its error is the filter's (see [recordexpr.Program.Filter]); what
// becomes of the record then is the subscription's on_filter_error.
func (e *Endpoint) Filter(rec *recordexpr.Record) (bool, error) {
	switch {
	case e.exprErr != nil:
		return false, e.exprErr
	case e.expr == nil:
		return true, nil
	}
	return e.expr.Filter(rec)
}

// Shapes reports whether Shape changes anything (or fails): without a
// filter, transform or value format there is nothing to do, and callers
// skip building the record it reads.
func (e *Endpoint) Shapes() bool { return e.exprErr != nil || e.expr != nil }

// Shape puts into m, a message filled from rec, the body the subscription
// sends: the transform's result, or the value checked against its format
// (a JSON value goes typed application/json, which the envelope embeds as
// a JSON object). With on_filter_error "dead_letter" the filter is
// evaluated again, so that a record it failed on is not delivered. Every
// error wraps [webhooks.ErrInvalidMessage]: final, the record is
// dead-lettered with it as the reason.
func (e *Endpoint) Shape(m *webhooks.Message, rec *recordexpr.Record) error {
	if e.exprErr != nil {
		return invalid(e.exprErr)
	}
	if e.expr == nil {
		return nil
	}
	if e.sub.OnFilterError == subscription.OnFilterErrorDeadLetter && e.expr.HasFilter() {
		if _, err := e.expr.Filter(rec); err != nil {
			return invalid(err)
		}
	}
	b, err := e.expr.Render(rec)
	if err != nil {
		return invalid(err)
	}
	m.Value = b.Value
	if b.ContentType != "" && (e.expr.Spec().Transform != "" || m.ContentType == "") {
		m.ContentType = b.ContentType
	}
	return nil
}

func invalid(err error) error { return fmt.Errorf("%w: %w", webhooks.ErrInvalidMessage, err) }
