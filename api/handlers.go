package api

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/keyhook/keyhook/subscription"
)

// Media types of request bodies.
const (
	mediaJSON       = "application/json"
	mediaMergePatch = "application/merge-patch+json"
)

// MaxIdempotencyKeyLength is the longest Idempotency-Key accepted.
const MaxIdempotencyKeyLength = 255

type handlers struct {
	deps Dependencies
	cfg  Config
	log  *slog.Logger
}

// listResponse wraps collections in an object so that fields can be added
// without breaking clients.
type listResponse struct {
	Items      []*subscription.Subscription `json:"items"`
	NextCursor string                       `json:"next_cursor,omitempty"`
}

// create checks in an order that keeps bad input from changing anything:
// media type, size, idempotency key, JSON shape, field rules, then the
// endpoint's address (the only check that may touch the network), and
// stores only after all of them passed.
func (h *handlers) create(w http.ResponseWriter, r *http.Request) {
	body, p := h.readBody(w, r, mediaJSON)
	if p != nil {
		if p.Status == http.StatusUnsupportedMediaType {
			w.Header().Set("Accept-Post", mediaJSON)
		}
		writeProblem(w, p)
		return
	}
	key, hasKey, p := idempotencyKey(r)
	if p != nil {
		writeProblem(w, p)
		return
	}
	sub, roErrs, p := decodeSubscription(body)
	if p != nil {
		writeProblem(w, p)
		return
	}
	if _, err := resolveSecrets(nil, sub, h.cfg.Now(), false); err != nil {
		h.internal(w, r, "create subscription", err)
		return
	}
	sub.Endpoint.KeepCredentials = false // nothing to keep on create
	if p := finish(sub, roErrs, h.cfg.SchemaRegistry); p != nil {
		writeProblem(w, p)
		return
	}
	if p := h.checkTopics(r, sub); p != nil {
		writeProblem(w, p)
		return
	}
	if p := h.checkURL(r, sub.Endpoint.URL); p != nil {
		writeProblem(w, p)
		return
	}
	if p := h.checkTokenURLs(r, sub); p != nil {
		writeProblem(w, p)
		return
	}
	// The start is fixed before the subscription exists: its id is drawn
	// first, the group's start offsets are committed, and only then is it
	// stored, so no node can consume the group from anywhere else. A crash
	// in between leaves commits of a group no subscription has, which
	// nothing reads. (A replayed idempotent request leaves such commits
	// too; the store only knows it is a replay when it is asked to store.)
	sub.ID = subscription.NewID()
	if err := h.deps.Starts.ResolveStart(r.Context(), sub); err != nil {
		h.log.WarnContext(r.Context(), "api: create subscription: fix the start position", "error", err)
		writeProblem(w, newProblem(http.StatusServiceUnavailable, slugKafkaUnavailable,
			"Kafka did not answer while the subscription's start position was fixed; nothing was stored, retry later"))
		return
	}
	var err error
	replayed := false
	if hasKey {
		tok, ok := caller(r)
		if !ok {
			h.internal(w, r, "create subscription", errors.New("idempotency key without an authenticated caller"))
			return
		}
		// Keys are the token's: another token's request with the same
		// key is another request.
		sum := sha256.Sum256(body)
		replayed, err = h.deps.Store.CreateIdempotent(r.Context(), sub, subscription.Idempotency{
			Caller: tok.Name, Key: key, Fingerprint: hex.EncodeToString(sum[:])})
	} else {
		err = h.deps.Store.Create(r.Context(), sub)
	}
	if err != nil {
		var verr *subscription.ValidationError
		switch {
		case errors.Is(err, subscription.ErrIdempotencyKeyReused):
			writeProblem(w, newProblem(http.StatusUnprocessableEntity, slugIdempotencyKeyReused,
				"this token used this Idempotency-Key in the last 24 hours for a request with another body; use a new key"))
		case errors.As(err, &verr): // finish validated; kept for a stricter store
			writeProblem(w, validationProblem(verr.Errors))
		default:
			h.internal(w, r, "create subscription", err)
		}
		return
	}
	// The creating answer is the one that shows the signing secrets; a
	// replay shows none (the store keeps none for it), so a secret cannot
	// outlive its rotation in a replay.
	shown := allSecrets(sub)
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
		shown = nil
	}
	w.Header().Set("Location", "/v1/subscriptions/"+url.PathEscape(sub.ID))
	w.Header().Set("ETag", etag(sub))
	writeJSON(w, http.StatusCreated, present(r, sub, shown))
}

// idempotencyKey reads the optional Idempotency-Key header: 1 to 255
// visible ASCII characters.
func idempotencyKey(r *http.Request) (string, bool, *problem) {
	values := r.Header.Values("Idempotency-Key")
	if len(values) == 0 {
		return "", false, nil
	}
	bad := func(msg string) (string, bool, *problem) {
		return "", false, newProblem(http.StatusBadRequest, slugInvalidHeader, "Idempotency-Key "+msg,
			subscription.FieldError{Field: "Idempotency-Key", Message: msg})
	}
	if len(values) > 1 {
		return bad("must be given once")
	}
	k := values[0]
	if k == "" || len(k) > MaxIdempotencyKeyLength {
		return bad(fmt.Sprintf("must be 1 to %d characters", MaxIdempotencyKeyLength))
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < '!' || c > '~' {
			return bad("must be visible ASCII characters only")
		}
	}
	return k, true, nil
}

func (h *handlers) list(w http.ResponseWriter, r *http.Request) {
	q, p := query(r, "limit", "cursor", "topic")
	if p != nil {
		writeProblem(w, p)
		return
	}
	limit, p := limitParam(q, subscription.DefaultPageLimit, subscription.MaxPageLimit)
	if p != nil {
		writeProblem(w, p)
		return
	}
	page, err := h.deps.Store.Page(r.Context(), subscription.PageRequest{Limit: limit, Cursor: q["cursor"], Topic: q["topic"]})
	switch {
	case errors.Is(err, subscription.ErrInvalidCursor):
		writeProblem(w, invalidCursor())
		return
	case err != nil:
		h.internal(w, r, "list subscriptions", err)
		return
	}
	items := make([]*subscription.Subscription, len(page.Items)) // "items": [], never null
	for i, sub := range page.Items {
		items[i] = present(r, sub, nil)
	}
	writeJSON(w, http.StatusOK, listResponse{Items: items, NextCursor: page.NextCursor})
}

func invalidCursor() *problem {
	return newProblem(http.StatusBadRequest, slugInvalidQuery, "cursor is not one this API returned",
		subscription.FieldError{Field: "cursor", Message: "must be a next_cursor from a previous page, unchanged"})
}

// query returns the request's query parameters, refusing names outside
// allowed (a typo such as ?limt= would otherwise be silently ignored) and
// repeated names.
func query(r *http.Request, allowed ...string) (map[string]string, *problem) {
	values, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, newProblem(http.StatusBadRequest, slugInvalidQuery, "the query string is malformed")
	}
	out := make(map[string]string, len(values))
	var errs []subscription.FieldError
	for name, vs := range values {
		switch {
		case !slices.Contains(allowed, name):
			errs = append(errs, subscription.FieldError{Field: name, Message: "is not a known query parameter; known: " + strings.Join(allowed, ", ")})
		case len(vs) > 1:
			errs = append(errs, subscription.FieldError{Field: name, Message: "must be given once"})
		default:
			out[name] = vs[0]
		}
	}
	if len(errs) > 0 {
		// Map order is random; the answer must not be.
		slices.SortFunc(errs, func(a, b subscription.FieldError) int { return cmp.Compare(a.Field, b.Field) })
		return nil, newProblem(http.StatusBadRequest, slugInvalidQuery, "the query has unknown or repeated parameters", errs...)
	}
	return out, nil
}

// limitParam reads ?limit=, def when absent.
func limitParam(q map[string]string, def, max int) (int, *problem) {
	raw, ok := q["limit"]
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 || n > max {
		return 0, newProblem(http.StatusBadRequest, slugInvalidQuery, "limit is out of range",
			subscription.FieldError{Field: "limit", Message: fmt.Sprintf("must be a whole number from 1 to %d", max)})
	}
	return n, nil
}

func (h *handlers) get(w http.ResponseWriter, r *http.Request) {
	sub, ok := h.lookup(w, r)
	if !ok {
		return
	}
	w.Header().Set("ETag", etag(sub))
	writeJSON(w, http.StatusOK, present(r, sub, nil))
}

// replace is PUT: the body is a whole subscription, as for create; fields
// it leaves out take their defaults, except signing, which is kept.
func (h *handlers) replace(w http.ResponseWriter, r *http.Request) {
	body, p := h.readBody(w, r, mediaJSON)
	if p != nil {
		writeProblem(w, p)
		return
	}
	_, roErrs, p := decodeSubscription(body)
	if p != nil {
		writeProblem(w, p)
		return
	}
	id := chi.URLParam(r, "id")
	expected, ok := h.precondition(w, r, id)
	if !ok {
		return
	}
	var shown map[string]bool
	stored, err := h.deps.Store.Update(r.Context(), id, expected, func(cur *subscription.Subscription) error {
		next, _, _ := decodeSubscription(body) // a fresh copy per attempt
		var p *problem
		shown, p = h.complete(r, cur, next, roErrs, true)
		if p != nil {
			return &problemError{p}
		}
		*cur = *next
		return nil
	})
	h.answerChange(w, r, id, stored, shown, err)
}

// patch is PATCH with a JSON merge patch (RFC 7396). The patch is
// applied to the version stored at the time of the write: without
// If-Match, a concurrent change is not lost but patched over.
func (h *handlers) patch(w http.ResponseWriter, r *http.Request) {
	body, p := h.readBody(w, r, mediaMergePatch, mediaJSON)
	if p != nil {
		if p.Status == http.StatusUnsupportedMediaType {
			w.Header().Set("Accept-Patch", mediaMergePatch)
		}
		writeProblem(w, p)
		return
	}
	if _, _, p := checkPatch(body); p != nil {
		writeProblem(w, p)
		return
	}
	id := chi.URLParam(r, "id")
	expected, ok := h.precondition(w, r, id)
	if !ok {
		return
	}
	var shown map[string]bool
	stored, err := h.deps.Store.Update(r.Context(), id, expected, func(cur *subscription.Subscription) error {
		next, roErrs, p := mergePatch(cur, body)
		if p != nil {
			return &problemError{p}
		}
		shown, p = h.complete(r, cur, next, roErrs, false)
		if p != nil {
			return &problemError{p}
		}
		*cur = *next
		return nil
	})
	h.answerChange(w, r, id, stored, shown, err)
}

// complete readies next, a client's new version of cur, for storing:
// secrets resolved against cur, fields normalized and validated,
// credentials kept from following the endpoint to another origin unasked,
// topics checked against the other subscriptions when they changed, and
// the endpoint URL checked when it changed. It returns the ids of the
// signing secrets it made, or the problem to answer with.
func (h *handlers) complete(r *http.Request, cur, next *subscription.Subscription, roErrs []subscription.FieldError, keepSigning bool) (map[string]bool, *problem) {
	keepCredentials := next.Endpoint.KeepCredentials
	next.Endpoint.KeepCredentials = false // one request's instruction, never stored
	shown, err := resolveSecrets(cur, next, h.cfg.Now(), keepSigning)
	if err != nil {
		h.log.ErrorContext(r.Context(), "api: signing secret", "error", err)
		return nil, newProblem(http.StatusInternalServerError, slugInternal, "the request could not be completed; it has been logged")
	}
	if p := finish(next, roErrs, h.cfg.SchemaRegistry); p != nil {
		return nil, p
	}
	if !keepCredentials {
		if p := credentialsMoved(cur, next); p != nil {
			return nil, p
		}
	}
	if !slices.Equal(cur.Topics, next.Topics) || cur.DeadLetterTopic != next.DeadLetterTopic {
		if p := h.checkTopics(r, next); p != nil {
			return nil, p
		}
	}
	if cur.Endpoint.URL != next.Endpoint.URL {
		if p := h.checkURL(r, next.Endpoint.URL); p != nil {
			return nil, p
		}
	}
	if p := h.checkTokenURLs(r, next); p != nil {
		return nil, p
	}
	return shown, nil
}

func (h *handlers) delete(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	expected, ok := h.precondition(w, r, id)
	if !ok {
		return
	}
	err := h.deps.Store.DeleteVersion(r.Context(), id, expected)
	switch {
	case errors.Is(err, subscription.ErrNotFound):
		writeProblem(w, notFound(id))
	case errors.Is(err, subscription.ErrVersionMismatch):
		writeProblem(w, newProblem(http.StatusPreconditionFailed, slugPreconditionFailed,
			"the subscription changed after it was read; fetch it again and retry"))
	case err != nil:
		h.internal(w, r, "delete subscription", err)
	default:
		h.scheduleCleanup(r, id)
		w.WriteHeader(http.StatusNoContent)
	}
}

// scheduleCleanup has the deleted subscription's state removed once the
// nodes stopped it. The subscription is gone whatever happens here, so a
// failure is logged, not answered: a retried DELETE would only find it
// missing.
func (h *handlers) scheduleCleanup(r *http.Request, id string) {
	if h.deps.Cleanup == nil {
		return
	}
	if err := h.deps.Cleanup.Schedule(r.Context(), id); err != nil {
		h.log.Error("deleted subscription's state not scheduled for cleanup; it stays in Redis and Kafka",
			"subscription", id, "err", err)
	}
}

func (h *handlers) pause(w http.ResponseWriter, r *http.Request)  { h.setPaused(w, r, true) }
func (h *handlers) resume(w http.ResponseWriter, r *http.Request) { h.setPaused(w, r, false) }

// setPaused is PATCH {"paused": v}. Pausing a paused subscription changes
// nothing, its version included.
func (h *handlers) setPaused(w http.ResponseWriter, r *http.Request, paused bool) {
	id := chi.URLParam(r, "id")
	expected, ok := h.precondition(w, r, id)
	if !ok {
		return
	}
	stored, err := h.deps.Store.Update(r.Context(), id, expected, func(cur *subscription.Subscription) error {
		cur.Paused = paused
		return nil
	})
	h.answerChange(w, r, id, stored, nil, err)
}

// answerChange answers a Store.Update made by a handler, showing the
// values of the signing secrets in shown.
func (h *handlers) answerChange(w http.ResponseWriter, r *http.Request, id string, stored *subscription.Subscription, shown map[string]bool, err error) {
	var pe *problemError
	var verr *subscription.ValidationError
	switch {
	case errors.As(err, &pe):
		writeProblem(w, pe.p)
	case errors.Is(err, subscription.ErrNotFound):
		writeProblem(w, notFound(id))
	case errors.Is(err, subscription.ErrVersionMismatch):
		writeProblem(w, newProblem(http.StatusPreconditionFailed, slugPreconditionFailed,
			"the subscription changed after it was read; fetch it again and retry"))
	case errors.As(err, &verr):
		writeProblem(w, validationProblem(verr.Errors))
	case err != nil:
		h.internal(w, r, "update subscription", err)
	default:
		w.Header().Set("ETag", etag(stored))
		writeJSON(w, http.StatusOK, answerFor(r, stored, shown))
	}
}

// precondition resolves If-Match for the subscription id into the
// version a change must apply to. When the change must not go ahead it
// answers the request itself (404, 412 or 500) and reports false.
func (h *handlers) precondition(w http.ResponseWriter, r *http.Request, id string) (int64, bool) {
	m := parseIfMatch(r)
	if !m.present || m.any {
		return subscription.AnyVersion, true
	}
	cur, ok := h.lookup(w, r)
	if !ok {
		return 0, false
	}
	v, ok := m.expectedVersion(cur)
	if !ok {
		writeProblem(w, preconditionFailed(cur))
		return 0, false
	}
	return v, true
}

// checkTopics refuses sub's topics and dead-letter topic when they clash
// with another stored subscription's (see Subscription.ValidateAgainst).
// The check reads every subscription and is not atomic with the write
// that follows (the store's compare-and-set covers one subscription, and
// checking every other one inside it would mean decoding them all in
// Lua): two requests racing, each making one half of a clash, can both
// pass. Subscriptions are written by operators, rarely; openapi.yaml and
// the README say so.
func (h *handlers) checkTopics(r *http.Request, sub *subscription.Subscription) *problem {
	var others []*subscription.Subscription
	cursor := ""
	for {
		page, err := h.deps.Store.Page(r.Context(), subscription.PageRequest{Limit: subscription.MaxPageLimit, Cursor: cursor})
		if err != nil {
			h.log.ErrorContext(r.Context(), "api: list subscriptions for a topic check", "error", err)
			return newProblem(http.StatusInternalServerError, slugInternal, "the request could not be completed; it has been logged")
		}
		others = append(others, page.Items...)
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	if errs := sub.ValidateAgainst(others); len(errs) > 0 {
		return validationProblem(errs)
	}
	return nil
}

// credentialsMoved refuses next, a change of cur, that moves the endpoint
// to another origin (scheme, host, port) while still holding credentials
// set for the old one: the next delivery would hand them to the new host.
// Credentials the request sent again, under new values, may go; stored
// ones need endpoint.keep_credentials, or the request drops them.
func credentialsMoved(cur, next *subscription.Subscription) *problem {
	was, now := cur.Endpoint.Auth, next.Endpoint.Auth
	if was == nil || now == nil {
		return nil
	}
	from, to := origin(cur.Endpoint.URL), origin(next.Endpoint.URL)
	if from == to {
		return nil
	}
	carried := now.BearerToken != "" && now.BearerToken == was.BearerToken ||
		now.BasicPassword != "" && now.BasicPassword == was.BasicPassword ||
		now.GoogleIDToken != nil && was.GoogleIDToken != nil && now.GoogleIDToken.CredentialsJSON != "" &&
			now.GoogleIDToken.CredentialsJSON == was.GoogleIDToken.CredentialsJSON ||
		now.OAuth2 != nil && was.OAuth2 != nil && now.OAuth2.ClientSecret == was.OAuth2.ClientSecret ||
		now.ClientCertificate != nil && was.ClientCertificate != nil && now.ClientCertificate.KeyPEM == was.ClientCertificate.KeyPEM
	for name, v := range now.Headers {
		for oldName, old := range was.Headers {
			if http.CanonicalHeaderKey(name) == http.CanonicalHeaderKey(oldName) && v == old {
				carried = true
			}
		}
	}
	if !carried {
		return nil
	}
	return validationProblem([]subscription.FieldError{{Field: "endpoint.auth",
		Message: fmt.Sprintf("holds credentials set for %s, and the endpoint moves to %s: send endpoint.auth again, "+
			"drop it (null), or set endpoint.keep_credentials to true to send the stored credentials there", from, to)}})
}

// origin is raw's scheme://host:port, lower-case, with the scheme's
// default port made explicit, or "" when raw does not parse.
func origin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	scheme, port := strings.ToLower(u.Scheme), u.Port()
	if port == "" {
		switch scheme {
		case "http":
			port = "80"
		case "https":
			port = "443"
		}
	}
	return scheme + "://" + strings.ToLower(u.Hostname()) + ":" + port
}

// checkTokenURLs checks the token endpoints of sub's credentials like the
// endpoint: they are egress too (the dialer checks them again).
func (h *handlers) checkTokenURLs(r *http.Request, sub *subscription.Subscription) *problem {
	for _, t := range sub.Endpoint.TokenURLs() {
		if err := h.deps.URLs.CheckURL(r.Context(), t.URL); err != nil {
			return newProblem(http.StatusBadRequest, slugForbiddenEndpoint, "the token URL was refused",
				subscription.FieldError{Field: t.Field, Message: err.Error()})
		}
	}
	return nil
}

func (h *handlers) checkURL(r *http.Request, raw string) *problem {
	if err := h.deps.URLs.CheckURL(r.Context(), raw); err != nil {
		return newProblem(http.StatusBadRequest, slugForbiddenEndpoint, "the endpoint URL was refused",
			subscription.FieldError{Field: "endpoint.url", Message: err.Error()})
	}
	return nil
}

// lookup loads the subscription named by the {id} URL parameter, or
// answers the request itself and reports false.
func (h *handlers) lookup(w http.ResponseWriter, r *http.Request) (*subscription.Subscription, bool) {
	id := chi.URLParam(r, "id")
	sub, err := h.deps.Store.Get(r.Context(), id)
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

// readBody checks the request's media type against accept (a missing
// Content-Type is taken as the first) and reads the body within the size
// limit.
func (h *handlers) readBody(w http.ResponseWriter, r *http.Request, accept ...string) ([]byte, *problem) {
	if p := checkContentType(r.Header.Get("Content-Type"), accept); p != nil {
		return nil, p
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, newProblem(http.StatusRequestEntityTooLarge, slugBodyTooLarge,
				fmt.Sprintf("request body exceeds %d bytes", tooLarge.Limit))
		}
		return nil, newProblem(http.StatusBadRequest, slugInvalidJSON, "request body could not be read")
	}
	return body, nil
}

// checkContentType accepts a missing Content-Type and the accepted media
// types (with no charset, or UTF-8, the only one JSON allows).
func checkContentType(ct string, accept []string) *problem {
	if ct == "" {
		return nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err == nil && slices.Contains(accept, mt) {
		if cs, ok := params["charset"]; !ok || strings.EqualFold(cs, "utf-8") {
			return nil
		}
	}
	return newProblem(http.StatusUnsupportedMediaType, slugUnsupportedMediaType,
		"request body must be "+strings.Join(accept, " or ")+", not "+ct)
}

// internal logs err with the request it failed and answers 500 with a
// detail that says nothing of the cause: internals stay in the log.
func (h *handlers) internal(w http.ResponseWriter, r *http.Request, what string, err error) {
	if errors.Is(err, subscription.ErrUnavailable) {
		// Kafka is not answering yet (a coordinator being elected, a
		// broker restarting): the client may try again, nothing changed.
		h.log.WarnContext(r.Context(), "api: "+what, "method", r.Method, "path", r.URL.Path, "error", err)
		w.Header().Set("Retry-After", "1")
		writeProblem(w, newProblem(http.StatusServiceUnavailable, slugKafkaUnavailable, "kafka is not available; nothing changed, try again shortly"))
		return
	}
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
