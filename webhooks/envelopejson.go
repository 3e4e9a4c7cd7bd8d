package webhooks

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// appendEnvelope appends m as [NewEnvelope] describes it, encoded as
// encoding/json encodes an [Envelope] with HTML escaping off, byte for
// byte (FuzzAppendEnvelopeMatchesEncodingJSON holds it to that). Batches
// encode one per record: through reflection, two maps and their sorting
// the envelope was a third of a batch's CPU at 0 ms.
func appendEnvelope(dst []byte, m *Message) ([]byte, error) {
	if m.ID == "" {
		return dst, invalidMessage("envelope id must not be empty")
	}
	dst = append(dst, `{"id":`...)
	dst = appendJSONString(dst, m.ID, false)
	if m.Source != "" {
		dst = append(dst, `,"source":`...)
		dst = appendJSONString(dst, m.Source, false)
	}
	if m.Subject != "" {
		dst = append(dst, `,"subject":`...)
		dst = appendJSONString(dst, m.Subject, false)
	}
	dst = append(dst, `,"key":`...)
	switch {
	case m.Key == nil:
		dst = append(dst, "null"...)
	case isText(m.Key):
		dst = appendJSONString(dst, m.Key, false)
	default:
		dst = append(dst, `null,"key_base64":"`...)
		dst = base64.StdEncoding.AppendEncode(dst, m.Key)
		dst = append(dst, '"')
	}
	ct, _ := contentType(m)
	if ct != "" {
		dst = append(dst, `,"content_type":`...)
		dst = appendJSONString(dst, ct, false)
	}
	dst = append(dst, `,"value":`...)
	jsonType := ct != "" && isJSONMediaType(ct)
	switch {
	case m.Value == nil:
		dst = append(dst, "null"...)
	case len(m.Value) == 0:
		dst = append(dst, `""`...)
	case jsonType && json.Valid(m.Value):
		// encoding/json compacts a RawMessage it embeds.
		buf := bytes.NewBuffer(dst)
		if err := json.Compact(buf, m.Value); err != nil {
			return dst, fmt.Errorf("webhooks: encode envelope value: %w", err)
		}
		dst = buf.Bytes()
	case !jsonType && isText(m.Value):
		// NewEnvelope's json.Marshal of the text escapes HTML.
		dst = appendJSONString(dst, m.Value, true)
	default:
		dst = append(dst, `null,"value_base64":"`...)
		dst = base64.StdEncoding.AppendEncode(dst, m.Value)
		dst = append(dst, '"')
	}
	dst = appendHeaderMaps(dst, m.Headers)
	dst = append(dst, `,"attributes":{`...)
	attrs := make([]Attr, 0, len(m.Attributes))
	for i, a := range m.Attributes {
		// The last of a repeated name wins, as in a map.
		if !slices.ContainsFunc(m.Attributes[i+1:], func(b Attr) bool { return b.Name == a.Name }) {
			attrs = append(attrs, a)
		}
	}
	slices.SortFunc(attrs, func(a, b Attr) int { return strings.Compare(a.Name, b.Name) })
	for i, a := range attrs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, a.Name, false)
		dst = append(dst, ':')
		dst = appendJSONString(dst, a.Value, false)
	}
	dst = append(dst, '}')
	if !m.Time.IsZero() {
		dst = append(dst, `,"timestamp":"`...)
		dst = m.Time.UTC().AppendFormat(dst, time.RFC3339Nano)
		dst = append(dst, '"')
	}
	return append(dst, '}'), nil
}

// appendHeaderMaps appends the envelope's "headers" and, when a header
// is binary, "headers_base64": the last value of each name, text or not,
// names sorted as encoding/json sorts map keys.
func appendHeaderMaps(dst []byte, hs []Header) []byte {
	last := make([]Header, 0, len(hs))
	binary := false
	for i, h := range hs {
		if slices.ContainsFunc(hs[i+1:], func(o Header) bool { return o.Name == h.Name }) {
			continue
		}
		last = append(last, h)
		binary = binary || !isText(h.Value)
	}
	slices.SortFunc(last, func(a, b Header) int { return strings.Compare(a.Name, b.Name) })
	dst = append(dst, `,"headers":{`...)
	n := 0
	for _, h := range last {
		if !isText(h.Value) {
			continue
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst = appendJSONString(dst, h.Name, false)
		dst = append(dst, ':')
		dst = appendJSONString(dst, h.Value, false)
	}
	dst = append(dst, '}')
	if !binary {
		return dst
	}
	dst = append(dst, `,"headers_base64":{`...)
	n = 0
	for _, h := range last {
		if isText(h.Value) {
			continue
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst = appendJSONString(dst, h.Name, false)
		dst = append(dst, `:"`...)
		dst = base64.StdEncoding.AppendEncode(dst, h.Value)
		dst = append(dst, '"')
	}
	return append(dst, '}')
}

// appendJSONString appends s as a JSON string as encoding/json writes it:
// invalid UTF-8 as U+FFFD, U+2028 and U+2029 escaped, and <, > and &
// escaped only with escapeHTML.
func appendJSONString[S []byte | string](dst []byte, s S, escapeHTML bool) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && (!escapeHTML || b != '<' && b != '>' && b != '&') {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xf])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(string(s[i:min(len(s), i+utf8.UTFMax)]))
		switch {
		case c == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case c == '\u2028' || c == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
