package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/keyhook/keyhook/subscription"
)

// KeySource lists a subscription's keys whose records do not flow.
// control.KeyReader implements it.
type KeySource interface {
	Keys(ctx context.Context, s *subscription.Subscription, q subscription.KeysQuery) (*subscription.KeyList, error)
}

// keys is GET /v1/subscriptions/{id}/keys: the keys not flowing, as the
// partitions' owners last flushed them.
func (h *handlers) keys(w http.ResponseWriter, r *http.Request) {
	q, p := query(r, "state", "topic", "partition", "limit")
	if p == nil {
		var kq subscription.KeysQuery
		if kq, p = keysQuery(q); p == nil {
			h.listKeys(w, r, kq)
			return
		}
	}
	writeProblem(w, p)
}

func (h *handlers) listKeys(w http.ResponseWriter, r *http.Request, q subscription.KeysQuery) {
	sub, ok := h.lookup(w, r)
	if !ok {
		return
	}
	list, err := h.deps.Keys.Keys(r.Context(), sub, q)
	switch {
	case errors.Is(err, subscription.ErrNotFound):
		writeProblem(w, notFound(sub.ID))
	case err != nil:
		h.internal(w, r, "list keys", err)
	case list == nil:
		h.internal(w, r, "list keys", errors.New("key source returned no list and no error"))
	default:
		if list.Keys == nil {
			list.Keys = []subscription.StalledKey{}
		}
		writeJSON(w, http.StatusOK, list)
	}
}

// keysQuery reads the listing's parameters, naming the first bad one.
func keysQuery(q map[string]string) (subscription.KeysQuery, *problem) {
	var kq subscription.KeysQuery
	bad := func(field, msg string) (subscription.KeysQuery, *problem) {
		return subscription.KeysQuery{}, newProblem(http.StatusBadRequest, slugInvalidQuery, field+" is invalid",
			subscription.FieldError{Field: field, Message: msg})
	}
	if raw, ok := q["state"]; ok {
		for _, s := range strings.Split(raw, ",") {
			st := subscription.KeyState(s)
			if !st.Valid() {
				return bad("state", "must be retrying, in_flight or parked, or a comma-separated list of them")
			}
			kq.States = append(kq.States, st)
		}
	}
	if raw, ok := q["partition"]; ok {
		n, err := strconv.ParseInt(raw, 10, 32)
		if err != nil || n < 0 {
			return bad("partition", "must be a partition number, 0 or more")
		}
		p := int32(n)
		kq.Partition = &p
	}
	if raw, ok := q["topic"]; ok {
		if raw == "" {
			return bad("topic", "must not be empty")
		}
		kq.Topic = raw
	}
	limit, p := limitParam(q, subscription.DefaultKeysLimit, subscription.MaxKeysLimit)
	if p != nil {
		return subscription.KeysQuery{}, p
	}
	kq.Limit = limit
	return kq, nil
}
