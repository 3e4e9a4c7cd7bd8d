package webhooks

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// CloudEvents media types and version.
const (
	ceSpecVersion    = "1.0"
	ceStructuredType = "application/cloudevents+json"
)

// ceContextAttributes are the names the CloudEvents 1.0 core and the JSON
// format define, plus the partitioning extension we use: an extension made
// from an attribute must not take one of them.
var ceContextAttributes = map[string]bool{
	"specversion": true, "id": true, "source": true, "type": true,
	"datacontenttype": true, "dataschema": true, "subject": true, "time": true,
	"data": true, "data_base64": true, "partitionkey": true,
}

// ceAttribute is one context attribute or extension of an event, in the
// order it is written.
type ceAttribute struct{ name, value string }

func encodeCloudEvent(f Format, m *Message, ceType string) ([]byte, http.Header, error) {
	attrs, err := ceAttributes(m, ceType)
	if err != nil {
		return nil, nil, err
	}
	ct, ctHeader := contentType(m)
	h := make(http.Header, len(attrs)+len(m.Headers)+1)
	addRecordHeaders(h, m.Headers, ctHeader)

	if f == FormatCloudEventsBinary {
		if ct == "" {
			ct = octetStream
		}
		h.Set("Content-Type", ct)
		for _, a := range attrs {
			// Canonical "Ce-Name" form; receivers match header names
			// ignoring case.
			h.Set("Ce-"+a.name, percentEncode(a.value))
		}
		return m.Value, h, nil
	}

	doc := make(map[string]any, len(attrs)+2)
	for _, a := range attrs {
		doc[a.name] = a.value
	}
	if ct != "" {
		doc["datacontenttype"] = ct
	}
	if len(m.Value) > 0 {
		if isJSONMediaType(ct) && json.Valid(m.Value) {
			doc["data"] = json.RawMessage(m.Value)
		} else {
			doc["data_base64"] = base64.StdEncoding.EncodeToString(m.Value)
		}
	}
	body, err := marshalJSON(doc)
	if err != nil {
		return nil, nil, fmt.Errorf("webhooks: encode cloudevent: %w", err)
	}
	h.Set("Content-Type", ceStructuredType)
	return body, h, nil
}

// ceAttributes returns the context attributes and extensions of m's event,
// checked against the CloudEvents type system.
func ceAttributes(m *Message, ceType string) ([]ceAttribute, error) {
	if ceType == "" {
		ceType = DefaultCloudEventsType
	}
	prefix := m.ExtensionPrefix
	if prefix == "" {
		prefix = DefaultExtensionPrefix
	}
	switch {
	case m.ID == "" || !isCEString(m.ID):
		return nil, invalidMessage("cloudevents id must be a non-empty string without control characters")
	case m.Source == "" || !isCEString(m.Source):
		return nil, invalidMessage("cloudevents source must be a non-empty URI reference without control characters")
	case !isCEString(ceType):
		return nil, invalidMessage("cloudevents type must not contain control characters")
	case !isCEString(m.Subject):
		return nil, invalidMessage("cloudevents subject must not contain control characters")
	case !isLowerAlnum(prefix):
		return nil, invalidMessage("extension prefix %q must hold only lowercase ASCII letters and digits", prefix)
	}
	if _, err := url.Parse(m.Source); err != nil {
		return nil, invalidMessage("cloudevents source must be a URI reference")
	}

	attrs := make([]ceAttribute, 0, 8+len(m.Attributes))
	attrs = append(attrs,
		ceAttribute{"specversion", ceSpecVersion},
		ceAttribute{"id", m.ID},
		ceAttribute{"source", m.Source},
		ceAttribute{"type", ceType},
	)
	if m.Subject != "" {
		attrs = append(attrs, ceAttribute{"subject", m.Subject})
	}
	if !m.Time.IsZero() {
		attrs = append(attrs, ceAttribute{"time", m.Time.UTC().Format(time.RFC3339Nano)})
	}
	if m.DataSchema != "" {
		if !isCEString(m.DataSchema) {
			return nil, invalidMessage("cloudevents dataschema must not contain control characters")
		}
		attrs = append(attrs, ceAttribute{"dataschema", m.DataSchema})
	}
	seen := map[string]string{}
	addExt := func(from, name, value string) error {
		if ceContextAttributes[name] {
			return invalidMessage("%s would become the cloudevents extension %q, a reserved name", from, name)
		}
		if prev, ok := seen[name]; ok {
			return invalidMessage("%s and %s would both become the cloudevents extension %q", prev, from, name)
		}
		seen[name] = from
		attrs = append(attrs, ceAttribute{name, value})
		return nil
	}
	// An empty key says nothing a partition key could carry, and the
	// partitioning extension requires a non-empty value.
	if len(m.Key) > 0 {
		if isCEString(string(m.Key)) {
			attrs = append(attrs, ceAttribute{"partitionkey", string(m.Key)})
		} else if err := addExt("the key", prefix+"keybase64", base64.StdEncoding.EncodeToString(m.Key)); err != nil {
			return nil, err
		}
	}
	for _, a := range m.Attributes {
		if !isCEString(a.Value) {
			return nil, invalidMessage("attribute %q value must not contain control characters", a.Name)
		}
		if err := addExt(fmt.Sprintf("attribute %q", a.Name), prefix+extensionSuffix(a.Name), a.Value); err != nil {
			return nil, err
		}
	}
	return attrs, nil
}

// extensionSuffix keeps the lowercase ASCII letters and digits of name, the
// only characters a CloudEvents attribute name may hold.
func extensionSuffix(name string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r + ('a' - 'A')
		}
		return -1
	}, name)
}

func isLowerAlnum(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// percentEncode encodes an attribute value for a binary-mode header as the
// CloudEvents HTTP binding requires (section 3.1.3.2): space, double quote,
// percent and every byte outside printable ASCII become %XX. Encoding the
// UTF-8 bytes one by one is what the binding prescribes per character.
func percentEncode(s string) string {
	const hex = "0123456789ABCDEF"
	n := 0
	for i := 0; i < len(s); i++ {
		if mustPercentEncode(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if mustPercentEncode(c) {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func mustPercentEncode(c byte) bool {
	return c <= 0x20 || c >= 0x7f || c == '"' || c == '%'
}

// marshalJSON marshals v without escaping <, > and &: the body goes to a
// program, not into an HTML page, and stays readable in logs.
func marshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
