package webhooks

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// Envelope is the body of the envelope format ([FormatEnvelope]), sent as
// application/json, and one element of a batch ([Batch]). The schema, with
// every member always present unless marked optional:
//
//	{
//	  "id":             string,  the delivery id (Message.ID)
//	  "source":         string,  optional: Message.Source
//	  "subject":        string,  optional: Message.Subject
//	  "key":            string or null: the key when it is text, else null
//	  "key_base64":     string,  optional: the key in base64 when it is not text
//	  "content_type":   string,  optional: the value's media type, when known
//	  "value":          JSON, string or null: see below
//	  "value_base64":   string,  optional: the value in base64 when it is binary
//	  "headers":        object,  the message headers whose value is text, name -> value
//	  "headers_base64": object,  optional: the other headers, name -> value in base64
//	  "attributes":     object,  Message.Attributes, name -> value
//	  "timestamp":      string,  optional: Message.Time, RFC 3339 in UTC
//	}
//
// "value" is the value embedded as JSON when the content type is JSON
// (application/json, text/json or +json) and the value is valid JSON; else
// a string when the value is text (UTF-8 whose only control characters are
// tab, CR and LF) and the content type is not JSON; else null, with the
// bytes in "value_base64". A consumer therefore reads "value" as the
// document itself when content_type is JSON and as text otherwise, never
// having to guess whether a JSON string is the document or the text. A nil
// value (a tombstone) is null without value_base64; an empty one is "",
// whatever the content type.
// Text in "key" follows the same rule. Base64 is the standard alphabet,
// padded. When a header name repeats, the last value wins, as a consumer
// reading "the" header of that name expects; the raw format keeps every
// value.
type Envelope struct {
	ID            string            `json:"id"`
	Source        string            `json:"source,omitempty"`
	Subject       string            `json:"subject,omitempty"`
	Key           *string           `json:"key"`
	KeyBase64     string            `json:"key_base64,omitempty"`
	ContentType   string            `json:"content_type,omitempty"`
	Value         json.RawMessage   `json:"value"`
	ValueBase64   string            `json:"value_base64,omitempty"`
	Headers       map[string]string `json:"headers"`
	HeadersBase64 map[string]string `json:"headers_base64,omitempty"`
	Attributes    map[string]string `json:"attributes"`
	Timestamp     string            `json:"timestamp,omitempty"`
}

// NewEnvelope describes m as an [Envelope]. m.ID is required. The
// attributes are not checked here; [Encode] and [EncodeBatch] check them.
func NewEnvelope(m *Message) (*Envelope, error) {
	if m.ID == "" {
		return nil, invalidMessage("envelope id must not be empty")
	}
	ct, _ := contentType(m)
	e := &Envelope{
		ID:          m.ID,
		Source:      m.Source,
		Subject:     m.Subject,
		ContentType: ct,
		Headers:     make(map[string]string, len(m.Headers)),
		Attributes:  make(map[string]string, len(m.Attributes)),
	}
	if m.Key != nil {
		if isText(m.Key) {
			k := string(m.Key)
			e.Key = &k
		} else {
			e.KeyBase64 = base64.StdEncoding.EncodeToString(m.Key)
		}
	}
	jsonType := isJSONMediaType(ct)
	switch {
	case m.Value == nil:
		// null: a tombstone
	case len(m.Value) == 0:
		e.Value = json.RawMessage(`""`)
	case jsonType && json.Valid(m.Value):
		e.Value = json.RawMessage(m.Value)
	case !jsonType && isText(m.Value):
		s, err := json.Marshal(string(m.Value))
		if err != nil {
			return nil, fmt.Errorf("webhooks: encode envelope value: %w", err)
		}
		e.Value = s
	default:
		e.ValueBase64 = base64.StdEncoding.EncodeToString(m.Value)
	}
	for _, h := range m.Headers {
		if isText(h.Value) {
			e.Headers[h.Name] = string(h.Value)
			delete(e.HeadersBase64, h.Name)
			continue
		}
		if e.HeadersBase64 == nil {
			e.HeadersBase64 = map[string]string{}
		}
		e.HeadersBase64[h.Name] = base64.StdEncoding.EncodeToString(h.Value)
		delete(e.Headers, h.Name)
	}
	for _, a := range m.Attributes {
		e.Attributes[a.Name] = a.Value
	}
	if !m.Time.IsZero() {
		e.Timestamp = m.Time.UTC().Format(time.RFC3339Nano)
	}
	return e, nil
}

func encodeEnvelope(m *Message) ([]byte, http.Header, error) {
	body, err := appendEnvelope(make([]byte, 0, 512), m)
	if err != nil {
		return nil, nil, err
	}
	return body, http.Header{"Content-Type": {"application/json"}}, nil
}
