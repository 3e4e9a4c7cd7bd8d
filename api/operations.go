package api

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/keyhook/keyhook/auth"
	"github.com/keyhook/keyhook/nodes"
	"github.com/keyhook/keyhook/recordexpr"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/webhooks"
)

// MaxDeadLetterIDLength bounds one id in a redrive request.
const MaxDeadLetterIDLength = 256

func (h *handlers) getStatus(w http.ResponseWriter, r *http.Request) {
	sub, ok := h.lookup(w, r)
	if !ok {
		return
	}
	st, err := h.deps.Status.Status(r.Context(), sub)
	switch {
	case errors.Is(err, subscription.ErrNotFound): // deleted meanwhile
		writeProblem(w, notFound(sub.ID))
	case err != nil:
		h.internal(w, r, "subscription status", err)
	case st == nil:
		h.internal(w, r, "subscription status", errors.New("status source returned no status and no error"))
	default:
		now := h.cfg.Now()
		for i := range st.Partitions {
			ps := &st.Partitions[i]
			if ps.OldestPending != nil && ps.OldestPendingAgeMS == nil {
				age := max(0, now.Sub(*ps.OldestPending).Milliseconds())
				ps.OldestPendingAgeMS = &age
			}
			if ps.AckedRanges == nil {
				ps.AckedRanges = [][2]int64{}
			}
		}
		if st.Partitions == nil {
			st.Partitions = []subscription.PartitionStatus{}
		}
		// Whether deliveries run at all comes first: a paused
		// subscription's partitions stand still by design.
		st.Paused, st.PausedBy, st.PausedReason = sub.Paused, sub.PausedBy, sub.PausedReason
		st.Breakers = h.endpointBreakers(r, sub)
		writeJSON(w, http.StatusOK, st)
	}
}

// seekBody is the JSON of a seek request; the timestamp is read as text
// so that a malformed one is named as such.
type seekBody struct {
	To        subscription.SeekTo       `json:"to"`
	Timestamp string                    `json:"timestamp"`
	Offsets   []subscription.SeekOffset `json:"offsets"`
}

// decodeSeek turns a seek body into a valid request for sub, or into the
// problem to answer with. It never returns both, and never panics.
func decodeSeek(body []byte, sub *subscription.Subscription) (subscription.SeekRequest, *problem) {
	var b seekBody
	if _, p := decodeStrict(body, &b, nil); p != nil {
		return subscription.SeekRequest{}, p
	}
	req := subscription.SeekRequest{To: b.To, Offsets: b.Offsets}
	var errs []subscription.FieldError
	badTime := false
	if b.Timestamp != "" {
		t, err := time.Parse(time.RFC3339Nano, b.Timestamp)
		if err != nil {
			badTime = true
			errs = append(errs, subscription.FieldError{Field: "timestamp", Message: "must be an RFC 3339 time such as 2030-01-02T15:04:05Z"})
		}
		req.Timestamp = t
	}
	for _, fe := range req.Validate(sub) {
		if badTime && fe.Field == "timestamp" {
			continue // already said what is wrong with it
		}
		errs = append(errs, fe)
	}
	if len(errs) > 0 {
		return subscription.SeekRequest{}, validationProblem(errs)
	}
	return req, nil
}

func (h *handlers) seek(w http.ResponseWriter, r *http.Request) {
	body, p := h.readBody(w, r, mediaJSON)
	if p != nil {
		writeProblem(w, p)
		return
	}
	sub, ok := h.lookup(w, r)
	if !ok {
		return
	}
	req, p := decodeSeek(body, sub)
	if p != nil {
		writeProblem(w, p)
		return
	}
	res, err := h.deps.Seeker.Seek(r.Context(), sub, req)
	var verr *subscription.ValidationError
	switch {
	case errors.As(err, &verr):
		writeProblem(w, validationProblem(verr.Errors))
	case errors.Is(err, subscription.ErrNotFound):
		writeProblem(w, notFound(sub.ID))
	case err != nil:
		h.internal(w, r, "seek", err)
	case res == nil:
		h.internal(w, r, "seek", errors.New("seeker returned no result and no error"))
	default:
		if res.Partitions == nil {
			res.Partitions = []subscription.SeekedPartition{}
		}
		writeJSON(w, http.StatusOK, res)
	}
}

func (h *handlers) test(w http.ResponseWriter, r *http.Request) {
	body, p := h.readBody(w, r, mediaJSON)
	if p != nil {
		writeProblem(w, p)
		return
	}
	req, p := decodeTest(body)
	if p != nil {
		writeProblem(w, p)
		return
	}
	sub, ok := h.lookup(w, r)
	if !ok {
		return
	}
	if req.Filter != nil || req.Transform != nil {
		// The overrides are checked as the subscription's own fields
		// would be, and named the same.
		if _, err := recordexpr.Compile(req.WithOverrides(sub).RecordSpec()); err != nil {
			var e *recordexpr.Error
			if errors.As(err, &e) {
				writeProblem(w, validationProblem([]subscription.FieldError{{Field: e.Field, Message: e.Message}}))
				return
			}
		}
		sub = req.WithOverrides(sub)
	}
	res, err := h.deps.Tester.Test(r.Context(), sub, req)
	switch {
	case err != nil:
		h.internal(w, r, "test delivery", err)
	case res == nil:
		h.internal(w, r, "test delivery", errors.New("tester returned no result and no error"))
	default:
		writeJSON(w, http.StatusOK, res)
	}
}

// decodeTest reads the optional body of a test delivery: no body at all
// means the defaults.
func decodeTest(body []byte) (TestRequest, *problem) {
	var req TestRequest
	if len(bytes.TrimSpace(body)) == 0 {
		return req, nil
	}
	if _, p := decodeStrict(body, &req, nil); p != nil {
		return TestRequest{}, p
	}
	if req.Key != nil && len(*req.Key) > MaxTestKeyBytes {
		return TestRequest{}, validationProblem([]subscription.FieldError{{Field: "key", Message: fmt.Sprintf("must be at most %d bytes", MaxTestKeyBytes)}})
	}
	return req, nil
}

func (h *handlers) deadLetters(w http.ResponseWriter, r *http.Request) {
	q, p := query(r, "limit", "cursor")
	if p != nil {
		writeProblem(w, p)
		return
	}
	limit, p := limitParam(q, subscription.DefaultDeadLetterLimit, subscription.MaxDeadLetterLimit)
	if p != nil {
		writeProblem(w, p)
		return
	}
	sub, ok := h.lookup(w, r)
	if !ok {
		return
	}
	page, err := h.deps.DeadLetters.DeadLetters(r.Context(), sub, limit, q["cursor"])
	switch {
	case errors.Is(err, subscription.ErrInvalidCursor):
		writeProblem(w, invalidCursor())
	case errors.Is(err, subscription.ErrNotFound):
		writeProblem(w, notFound(sub.ID))
	case err != nil:
		h.internal(w, r, "list dead letters", err)
	case page == nil:
		h.internal(w, r, "list dead letters", errors.New("dead-letter source returned no page and no error"))
	default:
		if page.Items == nil {
			page.Items = []subscription.DeadLetter{}
		}
		writeJSON(w, http.StatusOK, page)
	}
}

// redriveRequest names the dead letters to deliver again: some by id, or
// all of them.
type redriveRequest struct {
	IDs []string `json:"ids"`
	All bool     `json:"all"`
}

// redriveResponse says how many dead letters were queued again.
type redriveResponse struct {
	Redriven int `json:"redriven"`
}

func decodeRedrive(body []byte) (redriveRequest, *problem) {
	var req redriveRequest
	if _, p := decodeStrict(body, &req, nil); p != nil {
		return req, p
	}
	var errs []subscription.FieldError
	switch {
	case req.All && len(req.IDs) > 0:
		errs = append(errs, subscription.FieldError{Field: "ids", Message: `must not be given with "all": true`})
	case !req.All && len(req.IDs) == 0:
		errs = append(errs, subscription.FieldError{Field: "ids", Message: `must list at least one dead-letter id, or use "all": true`})
	case len(req.IDs) > subscription.MaxRedriveIDs:
		errs = append(errs, subscription.FieldError{Field: "ids", Message: fmt.Sprintf("must list at most %d ids", subscription.MaxRedriveIDs)})
	default:
		first := make(map[string]int, len(req.IDs))
		for i, id := range req.IDs {
			field := "ids[" + strconv.Itoa(i) + "]"
			if id == "" || len(id) > MaxDeadLetterIDLength {
				errs = append(errs, subscription.FieldError{Field: field, Message: fmt.Sprintf("must be 1 to %d characters", MaxDeadLetterIDLength)})
				continue
			}
			if j, dup := first[id]; dup {
				errs = append(errs, subscription.FieldError{Field: field, Message: fmt.Sprintf("duplicates ids[%d]", j)})
				continue
			}
			first[id] = i
		}
	}
	if len(errs) > 0 {
		return req, validationProblem(errs)
	}
	return req, nil
}

func (h *handlers) redrive(w http.ResponseWriter, r *http.Request) {
	body, p := h.readBody(w, r, mediaJSON)
	if p != nil {
		writeProblem(w, p)
		return
	}
	req, p := decodeRedrive(body)
	if p != nil {
		writeProblem(w, p)
		return
	}
	sub, ok := h.lookup(w, r)
	if !ok {
		return
	}
	ids := req.IDs
	if req.All {
		ids = nil
	}
	n, err := h.deps.DeadLetters.Redrive(r.Context(), sub, ids)
	switch {
	case errors.Is(err, subscription.ErrNotFound):
		writeProblem(w, notFound(sub.ID))
	case err != nil:
		h.internal(w, r, "redrive dead letters", err)
	default:
		writeJSON(w, http.StatusOK, redriveResponse{Redriven: n})
	}
}

// nodesResponse lists the live nodes.
type nodesResponse struct {
	Items []nodes.Info `json:"items"`
}

func (h *handlers) nodes(w http.ResponseWriter, r *http.Request) {
	list, err := h.deps.Nodes.List(r.Context())
	if err != nil {
		h.internal(w, r, "list nodes", err)
		return
	}
	if list == nil {
		list = []nodes.Info{}
	}
	for i := range list {
		if list[i].Roles == nil {
			list[i].Roles = []string{}
		}
		if list[i].Owned == nil {
			list[i].Owned = []nodes.Ownership{}
		}
	}
	writeJSON(w, http.StatusOK, nodesResponse{Items: list})
}

// tokenResponse describes the caller's own token, so that a client (the
// console) can tell what it may do before it tries.
type tokenResponse struct {
	Name   string       `json:"name"`
	Scopes []auth.Scope `json:"scopes"`
}

func (h *handlers) token(w http.ResponseWriter, r *http.Request) {
	tok, _ := caller(r)
	scopes := tok.Scopes
	if scopes == nil {
		scopes = []auth.Scope{}
	}
	writeJSON(w, http.StatusOK, tokenResponse{Name: tok.Name, Scopes: scopes})
}

// endpointBreakers lists the nodes whose circuit breaker of sub's
// endpoint origin is open or half-open, from the node registry. The
// status goes without them, logged, when the registry cannot be read.
func (h *handlers) endpointBreakers(r *http.Request, sub *subscription.Subscription) []subscription.EndpointBreaker {
	if h.deps.Nodes == nil {
		return nil
	}
	origin, err := webhooks.Origin(sub.Endpoint.URL)
	if err != nil {
		return nil
	}
	list, err := h.deps.Nodes.List(r.Context())
	if err != nil {
		h.cfg.Logger.Warn("subscription status without breakers: the node registry did not answer", "subscription", sub.ID, "err", err)
		return nil
	}
	var out []subscription.EndpointBreaker
	for _, n := range list {
		for _, b := range n.Breakers {
			if b.Origin == origin {
				out = append(out, subscription.EndpointBreaker{Node: n.ID, Origin: b.Origin, State: b.State, Since: b.Since, Waiting: b.Waiting})
			}
		}
	}
	return out
}
