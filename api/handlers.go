package api

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/keyhook/keyhook/subscription"
)

type handlers struct {
	store   SubscriptionStore
	urls    URLChecker
	status  StatusSource
	maxBody int64
	log     *slog.Logger
}

// listResponse wraps collections in an object so that fields (paging, for
// one) can be added later without breaking clients.
type listResponse struct {
	Items []*subscription.Subscription `json:"items"`
}

func (h *handlers) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// create checks in an order that keeps bad input from changing anything:
// media type, size, JSON shape, field rules, then the endpoint's address
// (the only check that may touch the network), and stores only after all
// of them passed.
func (h *handlers) create(w http.ResponseWriter, r *http.Request) {
	if p := checkContentType(r.Header.Get("Content-Type")); p != nil {
		w.Header().Set("Accept-Post", "application/json")
		writeProblem(w, p)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.maxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeProblem(w, newProblem(http.StatusRequestEntityTooLarge, slugBodyTooLarge,
				fmt.Sprintf("request body exceeds %d bytes", tooLarge.Limit)))
			return
		}
		writeProblem(w, newProblem(http.StatusBadRequest, slugInvalidJSON, "request body could not be read"))
		return
	}
	sub, p := decodeCreate(body)
	if p != nil {
		writeProblem(w, p)
		return
	}
	if err := h.urls.CheckURL(r.Context(), sub.Endpoint.URL); err != nil {
		writeProblem(w, newProblem(http.StatusBadRequest, slugForbiddenEndpoint,
			"the endpoint URL was refused",
			subscription.FieldError{Field: "endpoint.url", Message: err.Error()}))
		return
	}
	if err := h.store.Create(r.Context(), sub); err != nil {
		var verr *subscription.ValidationError
		if errors.As(err, &verr) { // decodeCreate validated; kept for a stricter store
			writeProblem(w, validationProblem(verr.Errors))
			return
		}
		h.internal(w, r, "create subscription", err)
		return
	}
	w.Header().Set("Location", "/v1/subscriptions/"+url.PathEscape(sub.ID))
	writeJSON(w, http.StatusCreated, sub)
}

func (h *handlers) list(w http.ResponseWriter, r *http.Request) {
	subs, err := h.store.List(r.Context())
	if err != nil {
		h.internal(w, r, "list subscriptions", err)
		return
	}
	if subs == nil {
		subs = []*subscription.Subscription{} // "items": [], never null
	}
	writeJSON(w, http.StatusOK, listResponse{Items: subs})
}

func (h *handlers) get(w http.ResponseWriter, r *http.Request) {
	sub, ok := h.lookup(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, sub)
}

func (h *handlers) delete(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	if err := h.store.Delete(r.Context(), id); err != nil {
		if errors.Is(err, subscription.ErrNotFound) {
			writeProblem(w, notFound(id))
			return
		}
		h.internal(w, r, "delete subscription", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *handlers) getStatus(w http.ResponseWriter, r *http.Request) {
	sub, ok := h.lookup(w, r)
	if !ok {
		return
	}
	st, err := h.status.Status(r.Context(), sub)
	switch {
	case errors.Is(err, subscription.ErrNotFound): // deleted meanwhile
		writeProblem(w, notFound(sub.ID))
	case err != nil:
		h.internal(w, r, "subscription status", err)
	case st == nil:
		h.internal(w, r, "subscription status", errors.New("status source returned no status and no error"))
	default:
		writeJSON(w, http.StatusOK, st)
	}
}

// lookup loads the subscription named by the {id} URL parameter, or
// answers the request itself and reports false.
func (h *handlers) lookup(w http.ResponseWriter, r *http.Request) (*subscription.Subscription, bool) {
	id := chi.URLParam(r, "id")
	sub, err := h.store.Get(r.Context(), id)
	if errors.Is(err, subscription.ErrNotFound) {
		writeProblem(w, notFound(id))
		return nil, false
	}
	if err != nil {
		h.internal(w, r, "get subscription", err)
		return nil, false
	}
	return sub, true
}

func notFound(id string) *problem {
	return newProblem(http.StatusNotFound, slugNotFound, fmt.Sprintf("subscription %q does not exist", id))
}

// internal logs err with the request it failed and answers 500 with a
// detail that says nothing of the cause: internals stay in the log.
func (h *handlers) internal(w http.ResponseWriter, r *http.Request, what string, err error) {
	h.log.ErrorContext(r.Context(), "api: "+what, "method", r.Method, "path", r.URL.Path, "error", err)
	writeProblem(w, newProblem(http.StatusInternalServerError, slugInternal, "the request could not be completed; it has been logged"))
}

// recoverer turns a panic in a handler into a logged 500 problem, so one
// bad request cannot take the server's answer format (or the connection)
// down with it. http.ErrAbortHandler keeps its meaning.
func (h *handlers) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			h.internal(w, r, "panic", fmt.Errorf("%v", v))
		}()
		next.ServeHTTP(w, r)
	})
}

// checkContentType accepts a missing Content-Type and application/json
// (with no charset, or UTF-8, the only one JSON allows).
func checkContentType(ct string) *problem {
	if ct == "" {
		return nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err == nil && mt == "application/json" {
		if cs, ok := params["charset"]; !ok || strings.EqualFold(cs, "utf-8") {
			return nil
		}
	}
	return newProblem(http.StatusUnsupportedMediaType, slugUnsupportedMediaType,
		"request body must be application/json, not "+ct)
}
