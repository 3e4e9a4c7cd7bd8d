package api

import (
	"encoding/json"
	"net/http"

	"github.com/keyhook/keyhook/subscription"
)

// problemTypeBase prefixes every problem type; the slug after it names the
// kind of error and is what clients switch on. The URIs are identifiers,
// stable across versions; openapi.yaml lists every one.
const problemTypeBase = "https://keyhook.dev/problems/"

// Problem slugs, the last segment of a problem's type.
const (
	slugInvalidJSON          = "invalid-json"
	slugUnknownField         = "unknown-field"
	slugValidation           = "validation"
	slugForbiddenEndpoint    = "forbidden-endpoint"
	slugBodyTooLarge         = "body-too-large"
	slugUnsupportedMediaType = "unsupported-media-type"
	slugInvalidQuery         = "invalid-query"
	slugInvalidHeader        = "invalid-header"
	slugNotFound             = "not-found"
	slugMethodNotAllowed     = "method-not-allowed"
	slugPreconditionFailed   = "precondition-failed"
	slugIdempotencyKeyReused = "idempotency-key-reused"
	slugUnauthorized         = "unauthorized"
	slugInsufficientScope    = "insufficient-scope"
	slugNotReady             = "not-ready"
	slugKafkaUnavailable     = "kafka-unavailable"
	slugInternal             = "internal"
)

// title is fixed per slug, as RFC 9457 asks: the title does not change
// from one occurrence to the next; the detail does.
func title(slug string) string {
	switch slug {
	case slugInvalidJSON:
		return "Request body is not valid JSON for this resource"
	case slugUnknownField:
		return "Request body has unknown fields"
	case slugValidation:
		return "Request body is invalid"
	case slugForbiddenEndpoint:
		return "Endpoint URL is not allowed"
	case slugBodyTooLarge:
		return "Request body is too large"
	case slugUnsupportedMediaType:
		return "Unsupported media type"
	case slugInvalidQuery:
		return "Query parameters are invalid"
	case slugInvalidHeader:
		return "Request header is invalid"
	case slugNotFound:
		return "Not found"
	case slugMethodNotAllowed:
		return "Method not allowed"
	case slugPreconditionFailed:
		return "Precondition failed"
	case slugIdempotencyKeyReused:
		return "Idempotency key was used for another request"
	case slugUnauthorized:
		return "Authentication required"
	case slugInsufficientScope:
		return "Insufficient scope"
	case slugNotReady:
		return "Service not ready"
	case slugKafkaUnavailable:
		return "Kafka is not answering"
	default:
		return "Internal server error"
	}
}

// problem is an RFC 9457 problem details object.
type problem struct {
	Type   string                    `json:"type"`
	Title  string                    `json:"title"`
	Status int                       `json:"status"`
	Detail string                    `json:"detail,omitempty"`
	Errors []subscription.FieldError `json:"errors,omitempty"`
}

func newProblem(status int, slug, detail string, errs ...subscription.FieldError) *problem {
	return &problem{
		Type:   problemTypeBase + slug,
		Title:  title(slug),
		Status: status,
		Detail: detail,
		Errors: errs,
	}
}

// problemError carries a problem through code that returns errors, such
// as the function handed to Store.Update; the handler answers with it.
type problemError struct{ p *problem }

func (e *problemError) Error() string { return "api: " + e.p.Title + ": " + e.p.Detail }

// writeProblem sends p as application/problem+json.
func writeProblem(w http.ResponseWriter, p *problem) {
	writeBody(w, p.Status, "application/problem+json", p)
}

// writeJSON sends v as application/json.
func writeJSON(w http.ResponseWriter, status int, v any) {
	writeBody(w, status, "application/json", v)
}

func writeBody(w http.ResponseWriter, status int, contentType string, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		// Only our own response types reach here, and they always
		// encode; fall back to a fixed body rather than a half-written one.
		status, contentType = http.StatusInternalServerError, "application/problem+json"
		body = []byte(`{"type":"` + problemTypeBase + slugInternal + `","title":"` + title(slugInternal) + `","status":500}`)
	}
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
