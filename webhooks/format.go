package webhooks

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Header is one header of the message being delivered, as its producer
// wrote it: names may repeat and values are bytes.
type Header struct {
	Name  string
	Value []byte
}

// Attr is one piece of metadata the caller wants the endpoint to see next
// to the message: where it came from (topic, partition, offset), which
// subscription delivers it. Names are HTTP tokens, unique ignoring case;
// values are text without control characters.
type Attr struct {
	Name, Value string
}

// Message is one thing to deliver, in terms that know nothing of where it
// came from. The caller fills it from its source (a Kafka record, for
// keyhook's dispatcher) and [Encode] renders it in a [Format].
type Message struct {
	// ID identifies the delivery: the same on every attempt and every
	// redelivery, so endpoints can deduplicate. It becomes the CloudEvents
	// id and the envelope's id, and is required by every format but raw.
	ID string
	// Key is the message key; nil means the message has none, which is not
	// the same as an empty key.
	Key []byte
	// Value is the payload; nil (a tombstone) is not the same as empty.
	Value []byte
	// Headers are the message's own headers, in order.
	Headers []Header
	// Time is when the message was produced. Zero means unknown.
	Time time.Time
	// Source names where the message came from as a URI reference, such as
	// "kafka://cluster/orders". It becomes the CloudEvents source, which
	// requires it.
	Source string
	// Subject names the message within Source, such as its key or
	// "3/1017" (partition/offset). It becomes the CloudEvents subject.
	Subject string
	// Attributes is extra metadata shown to the endpoint, in order: as
	// Keyhook-<Name> headers in raw mode, as CloudEvents extensions, and in
	// the envelope's attributes object.
	Attributes []Attr
	// ContentType is the media type of Value. When empty, the value of the
	// last header named content-type (any case) that can travel as an HTTP
	// header is used instead, and failing that application/octet-stream.
	ContentType string
	// DataSchema, when set, is the URI of the schema Value was decoded
	// with (a Schema Registry's /schemas/ids/<id>); it becomes the
	// CloudEvents dataschema.
	DataSchema string
	// ExtensionPrefix starts the name of every CloudEvents extension made
	// from an attribute: with "kafka", the attribute topic becomes the
	// extension kafkatopic (header ce-kafkatopic). Lowercase ASCII letters
	// and digits only. Default "keyhook".
	ExtensionPrefix string
}

// DefaultExtensionPrefix is the ExtensionPrefix of a [Message] that sets
// none.
const DefaultExtensionPrefix = "keyhook"

// Format is how a [Message] is rendered into an HTTP request.
type Format string

// The formats [Encode] knows.
const (
	// FormatRaw sends the value as the body, untouched, with the metadata
	// in Keyhook-* headers. It is the default: the empty Format means raw.
	FormatRaw Format = "raw"
	// FormatCloudEventsBinary sends a CloudEvents 1.0 event in the HTTP
	// binding's binary mode: the value is the body and Content-Type its
	// content type (application/octet-stream when unknown), and the
	// attributes travel in headers, percent-encoded as the binding
	// requires: ce-specversion 1.0, ce-id (ID), ce-source (Source), ce-type,
	// ce-subject (Subject, when set), ce-time (Time in RFC 3339, UTC, when
	// set), ce-partitionkey (a non-empty key that is a valid CloudEvents
	// string; the partitioning extension), ce-<prefix>keybase64 (any other
	// non-empty key, in base64) and one ce-<prefix><name> extension per attribute, its name
	// lowercased with everything but ASCII letters and digits dropped.
	// The message's own headers travel as Keyhook-Header-<name>, as in raw.
	FormatCloudEventsBinary Format = "cloudevents-binary"
	// FormatCloudEventsStructured sends a CloudEvents 1.0 event in the HTTP
	// binding's structured mode: one application/cloudevents+json document
	// holding the attributes of the binary mode (datacontenttype only when
	// the content type is known) and the value as data, embedded as JSON
	// when the content type is JSON and the value valid JSON, else in
	// base64 as data_base64. A nil or empty value has no data. The
	// message's own headers travel as Keyhook-Header-<name>, as in raw.
	FormatCloudEventsStructured Format = "cloudevents-structured"
	// FormatEnvelope sends one JSON document describing the whole message;
	// see [Envelope].
	FormatEnvelope Format = "envelope"
)

// Formats returns the valid formats, the default first.
func Formats() []Format {
	return []Format{FormatRaw, FormatCloudEventsBinary, FormatCloudEventsStructured, FormatEnvelope}
}

// Validate reports whether f is one of [Formats] or empty (raw), naming
// the field as in a subscription's JSON.
func (f Format) Validate() error {
	switch f {
	case "", FormatRaw, FormatCloudEventsBinary, FormatCloudEventsStructured, FormatEnvelope:
		return nil
	}
	return fmt.Errorf("format must be one of raw, cloudevents-binary, cloudevents-structured or envelope, not %q", string(f))
}

// Header names of the raw format. Attributes add Keyhook-<Name> headers
// next to these.
const (
	HeaderKey          = "Keyhook-Key"
	HeaderKeyBase64    = "Keyhook-Key-Base64"
	HeaderTimestamp    = "Keyhook-Timestamp"
	HeaderRecordPrefix = "Keyhook-Header-"
)

// DefaultCloudEventsType is the CloudEvents type of an event whose caller
// names none.
const DefaultCloudEventsType = "dev.keyhook.record"

const octetStream = "application/octet-stream"

// ErrInvalidMessage is wrapped by every error of [Encode] about a message
// that cannot be rendered in the chosen format. Retrying cannot fix it.
var ErrInvalidMessage = errors.New("webhooks: invalid message")

func invalidMessage(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidMessage, fmt.Sprintf(format, args...))
}

// Encode renders m in format f (empty means raw) and returns the request
// body and the headers to send with it, Content-Type included. ceType is
// the CloudEvents type of the CloudEvents formats (empty means
// [DefaultCloudEventsType]) and is ignored by the others.
//
// Raw: the body is Value; Content-Type is the message's content type;
// every attribute becomes a Keyhook-<Name> header (Name in canonical case),
// Time becomes Keyhook-Timestamp (RFC 3339, UTC), the key becomes
// Keyhook-Key, or Keyhook-Key-Base64 when it cannot travel as a header
// value unchanged (binary, control characters, surrounding spaces), and
// every header whose name is a token and whose value is UTF-8 without
// control characters becomes Keyhook-Header-<name>. Other headers are left
// out: the envelope carries them all. A content-type header that supplied
// the content type is not repeated.
//
// CloudEvents: see [FormatCloudEventsBinary] and
// [FormatCloudEventsStructured]. Envelope: see [Envelope].
//
// Errors wrap [ErrInvalidMessage] and name the offending field; they never
// repeat the key or the value.
func Encode(f Format, m *Message, ceType string) (body []byte, header http.Header, err error) {
	if err := f.Validate(); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrInvalidMessage, err)
	}
	if err := checkMessage(m); err != nil {
		return nil, nil, err
	}
	switch f {
	case FormatCloudEventsBinary, FormatCloudEventsStructured:
		return encodeCloudEvent(f, m, ceType)
	case FormatEnvelope:
		return encodeEnvelope(m)
	}
	body, ct, h := encodeRaw(m)
	h["Content-Type"] = []string{ct}
	return body, h, nil
}

// NewRequest encodes m with [Encode] into a request to url, with m.ID as
// its delivery id (sent as webhook-id). The caller adds what belongs to the
// endpoint rather than the message: Signer, Auth.
func NewRequest(url string, f Format, m *Message, ceType string) (*Request, error) {
	if f == "" || f == FormatRaw {
		// The raw format, every record's, without a Content-Type header
		// made only to be taken out again.
		if err := checkMessage(m); err != nil {
			return nil, err
		}
		body, ct, h := encodeRaw(m)
		return &Request{URL: url, Body: body, ContentType: ct, Header: h, DeliveryID: m.ID}, nil
	}
	body, h, err := Encode(f, m, ceType)
	if err != nil {
		return nil, err
	}
	ct := h.Get("Content-Type")
	h.Del("Content-Type") // Send owns it; Request.ContentType carries it
	return &Request{URL: url, Body: body, ContentType: ct, Header: h, DeliveryID: m.ID}, nil
}

// checkMessage refuses what no format can render: a nil message, bad
// attributes, a content type with control characters.
func checkMessage(m *Message) error {
	if m == nil {
		return invalidMessage("nil message")
	}
	if err := checkAttributes(m.Attributes); err != nil {
		return err
	}
	if hasControl(m.ContentType) {
		return invalidMessage("content type must not contain control characters")
	}
	return nil
}

// encodeRaw returns the body, the content type and the other headers of
// m in the raw format.
func encodeRaw(m *Message) (body []byte, ct string, h http.Header) {
	ct, ctHeader := contentType(m)
	if ct == "" {
		ct = octetStream
	}
	hs := newHeaderSet(len(m.Attributes) + 2 + len(m.Headers))
	for _, a := range m.Attributes {
		hs.set(attributeNames.name(a.Name), a.Value)
	}
	// The key, the time and the record headers' values are written into
	// one string and cut from it: one allocation for all of them.
	var scratch [512]byte
	buf := scratch[:0]
	keyName := ""
	if m.Key != nil {
		if headerExact(m.Key) {
			keyName, buf = HeaderKey, append(buf, m.Key...)
		} else {
			keyName, buf = HeaderKeyBase64, base64.StdEncoding.AppendEncode(buf, m.Key)
		}
	}
	keyEnd := len(buf)
	if !m.Time.IsZero() {
		buf = m.Time.UTC().AppendFormat(buf, time.RFC3339Nano)
	}
	timeEnd := len(buf)
	// ends[i] is where record header i's value ends, -1 when it is left
	// out.
	var endsScratch [16]int
	ends := endsScratch[:0]
	for i, rh := range m.Headers {
		if !recordHeaderTravels(m.Headers, i, ctHeader) {
			ends = append(ends, -1)
			continue
		}
		buf = append(buf, rh.Value...)
		ends = append(ends, len(buf))
	}
	vals := string(buf)
	if keyName != "" {
		hs.set(keyName, vals[:keyEnd])
	}
	if timeEnd > keyEnd {
		hs.set(HeaderTimestamp, vals[keyEnd:timeEnd])
	}
	from := timeEnd
	for i, end := range ends {
		if end < 0 {
			continue
		}
		hs.add(recordHeaderNames.name(m.Headers[i].Name), vals[from:end])
		from = end
	}
	return m.Value, ct, hs.h
}

// recordHeaderTravels reports whether record header i travels as
// Keyhook-Header-<name>: its name is a token, its value safe in a header,
// and it is not the header at index skip (the one that supplied the
// content type).
func recordHeaderTravels(hs []Header, i, skip int) bool {
	return i != skip && isToken(hs[i].Name) && headerSafe(hs[i].Value)
}

// addRecordHeaders adds every header that can travel as is as
// Keyhook-Header-<name>, skipping the one at index skip.
func addRecordHeaders(h http.Header, hs []Header, skip int) {
	for i, rh := range hs {
		if !recordHeaderTravels(hs, i, skip) {
			continue
		}
		h.Add(recordHeaderNames.name(rh.Name), string(rh.Value))
	}
}

// contentType returns the media type of m's value and, when a header
// supplied it, that header's index (else -1). It returns "" when nothing
// says.
func contentType(m *Message) (ct string, header int) {
	if m.ContentType != "" {
		return m.ContentType, -1
	}
	for i := len(m.Headers) - 1; i >= 0; i-- {
		h := m.Headers[i]
		if strings.EqualFold(h.Name, "content-type") && headerSafe(h.Value) && len(h.Value) > 0 {
			return string(h.Value), i
		}
	}
	return "", -1
}

// reservedAttributes are names whose Keyhook-<Name> header the raw format
// or Send already uses.
var reservedAttributes = map[string]bool{
	"key":        true,
	"key-base64": true,
	"timestamp":  true,
	"attempt":    true,
}

// checkAttributes refuses attributes that could not travel as headers or
// would collide with one another or with the raw format's own headers.
func checkAttributes(as []Attr) error {
	// Every record is checked: its few attributes are compared with each
	// other rather than through a map, which cost more than the rest of
	// the check.
	var seen map[string]bool
	if len(as) > maxAttributesCompared {
		seen = make(map[string]bool, len(as))
	}
	for i, a := range as {
		name := strings.ToLower(a.Name)
		switch {
		case !isToken(a.Name):
			return invalidMessage("attribute name %q must be an HTTP token", a.Name)
		case reservedAttributes[name] || strings.HasPrefix(name, "header-"):
			return invalidMessage("attribute name %q is reserved", a.Name)
		case seen != nil && seen[name],
			seen == nil && slices.ContainsFunc(as[:i], func(b Attr) bool { return strings.EqualFold(b.Name, a.Name) }):
			return invalidMessage("attribute %q appears twice", a.Name)
		case !headerSafeString(a.Value):
			return invalidMessage("attribute %q value must be UTF-8 text without control characters", a.Name)
		}
		if seen != nil {
			seen[name] = true
		}
	}
	return nil
}

// maxAttributesCompared is the most attributes checkAttributes compares
// pairwise; more go through a map.
const maxAttributesCompared = 16
