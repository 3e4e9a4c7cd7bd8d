package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"

	"github.com/keyhook/keyhook/subscription"
)

// createRequest is the body of POST /v1/subscriptions: the fields a client
// may set. The read-only fields are decoded only so that a client sending
// them is told they are read-only, rather than that they are unknown.
type createRequest struct {
	Name            string                `json:"name"`
	Topics          []string              `json:"topics"`
	Endpoint        endpointRequest       `json:"endpoint"`
	Ordering        subscription.Ordering `json:"ordering"`
	MaxInFlight     int                   `json:"max_in_flight"`
	Start           subscription.Start    `json:"start"`
	DeadLetterTopic string                `json:"dead_letter_topic"`

	ID        json.RawMessage `json:"id"`
	CreatedAt json.RawMessage `json:"created_at"`
	UpdatedAt json.RawMessage `json:"updated_at"`
	Version   json.RawMessage `json:"version"`
}

type endpointRequest struct {
	URL       string `json:"url"`
	TimeoutMS int    `json:"timeout_ms"`
}

// schema mirrors createRequest's JSON shape: a key maps to the schema of an
// object value, or to nil for any other value. It lets an unknown-field
// error name the key's full path, which encoding/json does not.
type schema map[string]schema

func createSchema() schema {
	return schema{
		"name": nil, "topics": nil, "ordering": nil, "max_in_flight": nil, "start": nil, "dead_letter_topic": nil,
		"endpoint": {"url": nil, "timeout_ms": nil},
		"id":       nil, "created_at": nil, "updated_at": nil, "version": nil,
	}
}

// fieldKind says what JSON the field at path must hold, for type errors.
func fieldKind(path string) string {
	switch path {
	case "topics":
		return "an array of strings"
	case "endpoint":
		return "an object"
	case "max_in_flight", "endpoint.timeout_ms":
		return "an integer"
	default:
		return "a string"
	}
}

// decodeCreate turns a create request body into a normalized, valid
// subscription, or into the problem to answer with. It never returns both,
// and it never panics, whatever the bytes.
func decodeCreate(body []byte) (*subscription.Subscription, *problem) {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 {
		return nil, newProblem(400, slugInvalidJSON, "request body is empty")
	}
	if trimmed[0] != '{' {
		return nil, newProblem(400, slugInvalidJSON, "request body must be a JSON object")
	}

	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var req createRequest
	if err := dec.Decode(&req); err != nil {
		return nil, decodeProblem(body, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, newProblem(400, slugInvalidJSON, "request body has data after the JSON object")
	}

	var errs []subscription.FieldError
	for _, ro := range []struct {
		field string
		raw   json.RawMessage
	}{{"id", req.ID}, {"created_at", req.CreatedAt}, {"updated_at", req.UpdatedAt}, {"version", req.Version}} {
		if ro.raw != nil {
			errs = append(errs, subscription.FieldError{Field: ro.field, Message: "is read-only: the server sets it"})
		}
	}
	sub := &subscription.Subscription{
		Name:            req.Name,
		Topics:          req.Topics,
		Endpoint:        subscription.Endpoint{URL: req.Endpoint.URL, TimeoutMS: req.Endpoint.TimeoutMS},
		Ordering:        req.Ordering,
		MaxInFlight:     req.MaxInFlight,
		Start:           req.Start,
		DeadLetterTopic: req.DeadLetterTopic,
	}
	sub.Normalize()
	errs = append(errs, sub.Validate()...)
	if len(errs) > 0 {
		return nil, validationProblem(errs)
	}
	return sub, nil
}

func validationProblem(errs []subscription.FieldError) *problem {
	detail := "1 field is invalid"
	if len(errs) > 1 {
		detail = strconv.Itoa(len(errs)) + " fields are invalid"
	}
	return newProblem(400, slugValidation, detail, errs...)
}

// decodeProblem explains a json.Decoder error in the client's terms, naming
// the field whenever the decoder knows it.
func decodeProblem(body []byte, err error) *problem {
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return newProblem(400, slugInvalidJSON, "request body ends in the middle of a JSON value")
	case errors.As(err, &syntaxErr):
		return newProblem(400, slugInvalidJSON, fmt.Sprintf("malformed JSON at byte %d: %s", syntaxErr.Offset, syntaxErr.Error()))
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			return newProblem(400, slugInvalidJSON, "request body must be a JSON object")
		}
		msg := "must be " + fieldKind(typeErr.Field)
		if strings.HasPrefix(typeErr.Value, "number") && typeErr.Type != nil && typeErr.Type.Kind() == reflect.Int {
			msg = "must be a whole number within range"
		}
		return newProblem(400, slugInvalidJSON,
			fmt.Sprintf("field %s has the wrong JSON type (%s)", typeErr.Field, typeErr.Value),
			subscription.FieldError{Field: typeErr.Field, Message: msg})
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		paths := unknownFields(body, createSchema(), "")
		if len(paths) == 0 { // the decoder knows one even if the walk did not
			key, uerr := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
			if uerr != nil {
				key = strings.TrimPrefix(err.Error(), "json: unknown field ")
			}
			paths = []string{key}
		}
		errs := make([]subscription.FieldError, len(paths))
		for i, p := range paths {
			errs[i] = subscription.FieldError{Field: p, Message: "is not a known field"}
		}
		return newProblem(400, slugUnknownField, "unknown fields: "+strings.Join(paths, ", "), errs...)
	default:
		return newProblem(400, slugInvalidJSON, "request body could not be decoded")
	}
}

// unknownFields lists, in document order, the paths of keys in the JSON
// object raw that s does not define, matching keys case-insensitively as
// encoding/json does. It gives up quietly on anything that is not a
// well-formed object: the decoder has already judged the syntax.
func unknownFields(raw []byte, s schema, path string) []string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	var out []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return out
		}
		key, _ := tok.(string)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return out
		}
		p := key
		if path != "" {
			p = path + "." + key
		}
		child, known := lookup(s, key)
		switch {
		case !known:
			out = append(out, p)
		case child != nil:
			out = append(out, unknownFields(val, child, p)...)
		}
	}
	return out
}

func lookup(s schema, key string) (schema, bool) {
	if child, ok := s[key]; ok {
		return child, true
	}
	for k, child := range s {
		if strings.EqualFold(k, key) {
			return child, true
		}
	}
	return nil, false
}
