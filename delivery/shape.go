package delivery

import (
	"context"
	"errors"
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

// ErrFiltered is Shape's answer for a record the filter rejects at its
// delivery: one whose schema was not cached when its partition's worker
// read it, so that it passed there unfiltered. The caller acks it
// without sending it, and counts it filtered.
var ErrFiltered = errors.New("delivery: the filter rejects the record")

// Wait waits, bounded by ctx, until the schemas rec needs are cached (see
// [recordexpr.Program.Wait]); at once without a registry format.
func (e *Endpoint) Wait(ctx context.Context, rec *recordexpr.Record) error {
	if e.expr == nil {
		return nil
	}
	return e.expr.Wait(ctx, rec)
}

// Shape puts into m, a message filled from rec, the body the subscription
// sends: the transform's result, or the value decoded in its format (a
// decoded value goes as JSON, typed application/json, which the envelope
// embeds as a JSON object; m.DataSchema names the schema it was decoded
// with). The filter is evaluated again when a registry format may have
// let the record pass the worker unfiltered (its schema was not cached
// then), and with on_filter_error "dead_letter", so that a record it
// failed on is not delivered.
//
// Its error is one of three kinds. [ErrFiltered]: the filter rejects the
// record, to be acked unsent. One recordexpr.IsNotReady reports: a schema
// is still not cached (its fetch is under way, the registry does not
// answer), the record is to be shaped again later, never dead-lettered.
// Any other wraps [webhooks.ErrInvalidMessage]: final, the record is
// dead-lettered with it as the reason.
func (e *Endpoint) Shape(m *webhooks.Message, rec *recordexpr.Record) error {
	if e.exprErr != nil {
		return invalid(e.exprErr)
	}
	if e.expr == nil {
		return nil
	}
	deadLetter := e.sub.OnFilterError == subscription.OnFilterErrorDeadLetter
	if e.expr.HasFilter() && (deadLetter || e.expr.NeedsRegistry()) {
		pass, err := e.expr.Filter(rec)
		switch {
		case recordexpr.IsNotReady(err):
			return err
		case err != nil && (deadLetter || recordexpr.IsDecode(err)):
			return invalid(err)
		case err == nil && !pass:
			return ErrFiltered
		}
	}
	b, err := e.expr.Render(rec)
	switch {
	case recordexpr.IsNotReady(err):
		return err
	case err != nil:
		return invalid(err)
	}
	m.Value = b.Value
	m.DataSchema = b.Schema
	if b.ContentType != "" && (e.expr.Spec().Transform != "" || m.ContentType == "") {
		m.ContentType = b.ContentType
	}
	return nil
}

func invalid(err error) error { return fmt.Errorf("%w: %w", webhooks.ErrInvalidMessage, err) }
