package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/keyhook/keyhook/deliverylog"
	"github.com/keyhook/keyhook/subscription"
)

// DeliveryLogSource reads the delivery log; deliverylog.Reader implements
// it. Get gives an error wrapping deliverylog.ErrNotFound for a delivery
// it does not hold; List one wrapping deliverylog.ErrInvalidCursor for a
// cursor it did not make.
type DeliveryLogSource interface {
	Get(ctx context.Context, subscriptionID, deliveryID string) (*deliverylog.Delivery, error)
	List(ctx context.Context, subscriptionID string, failed bool, limit int, cursor string) (*deliverylog.Page, error)
}

// StreakClearer ends a subscription's failing streak when it is resumed,
// so that a resume starts counting disable_after from nothing;
// monitor.Streaks implements it.
type StreakClearer interface {
	Clear(ctx context.Context, subscriptionID string) error
}

// Limits of a delivery log listing.
const (
	defaultDeliveryLimit = 100
	maxDeliveryLimit     = 1000
)

// deliveries is GET /v1/subscriptions/{id}/deliveries: the logged
// deliveries, newest first, all or (?status=failed) those with a failed
// attempt.
func (h *handlers) deliveries(w http.ResponseWriter, r *http.Request) {
	q, p := query(r, "status", "limit", "cursor")
	if p != nil {
		writeProblem(w, p)
		return
	}
	limit, p := limitParam(q, defaultDeliveryLimit, maxDeliveryLimit)
	if p != nil {
		writeProblem(w, p)
		return
	}
	failed := false
	switch q["status"] {
	case "":
	case "failed":
		failed = true
	default:
		writeProblem(w, newProblem(http.StatusBadRequest, slugInvalidQuery, "status is not one this list knows",
			subscription.FieldError{Field: "status", Message: `must be "failed", or absent for every logged delivery`}))
		return
	}
	sub, ok := h.lookup(w, r)
	if !ok {
		return
	}
	if h.deps.DeliveryLog == nil {
		writeJSON(w, http.StatusOK, &deliverylog.Page{Items: []deliverylog.Summary{}})
		return
	}
	page, err := h.deps.DeliveryLog.List(r.Context(), sub.ID, failed, limit, q["cursor"])
	switch {
	case errors.Is(err, deliverylog.ErrInvalidCursor):
		writeProblem(w, invalidCursor())
	case err != nil:
		h.internal(w, r, "list the delivery log", err)
	default:
		writeJSON(w, http.StatusOK, page)
	}
}

// delivery is GET /v1/subscriptions/{id}/deliveries/{delivery_id}: one
// delivery's logged attempts.
func (h *handlers) delivery(w http.ResponseWriter, r *http.Request) {
	if _, p := query(r); p != nil {
		writeProblem(w, p)
		return
	}
	sub, ok := h.lookup(w, r)
	if !ok {
		return
	}
	id := chi.URLParam(r, "delivery_id")
	notLogged := newProblem(http.StatusNotFound, slugNotFound,
		"delivery "+id+" is not in the delivery log of subscription "+sub.ID+
			": never logged (the log is off, or it is not this subscription's), or gone after the retention or past the cap")
	if h.deps.DeliveryLog == nil {
		writeProblem(w, notLogged)
		return
	}
	d, err := h.deps.DeliveryLog.Get(r.Context(), sub.ID, id)
	switch {
	case errors.Is(err, deliverylog.ErrNotFound):
		writeProblem(w, notLogged)
	case err != nil:
		h.internal(w, r, "read the delivery log", err)
	default:
		writeJSON(w, http.StatusOK, d)
	}
}
