package recordexpr

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
)

// Format is how a record's key or value is decoded.
type Format string

const (
	// FormatBytes leaves the bytes as they are (the default).
	FormatBytes Format = "bytes"
	// FormatJSON decodes JSON text; a value that is not JSON cannot be
	// delivered (it is dead-lettered).
	FormatJSON Format = "json"
	// FormatAvro, FormatProtobuf and FormatJSONSchema are the Confluent
	// wire format (a zero byte, a 4-byte schema id, for Protobuf the
	// message indexes, then the encoded value): their schemas come from
	// a Schema Registry, through the [Decoder] a [SchemaDecoders] gives.
	FormatAvro       Format = "avro"
	FormatProtobuf   Format = "protobuf"
	FormatJSONSchema Format = "json_schema"
)

// Formats are every format a subscription may name.
var Formats = []Format{FormatBytes, FormatJSON, FormatAvro, FormatProtobuf, FormatJSONSchema}

// NeedsRegistry reports whether f is decoded with schemas from a Schema
// Registry.
func NeedsRegistry(f Format) bool {
	return f == FormatAvro || f == FormatProtobuf || f == FormatJSONSchema
}

// Known reports whether f is a format name at all, supported or not.
func Known(f Format) bool {
	for _, k := range Formats {
		if f == k {
			return true
		}
	}
	return f == ""
}

// Decoded is a key or value after its format's decoding.
type Decoded struct {
	// Val is the value as expressions see it.
	Val ref.Val
	// JSON is the value as JSON text, the body a delivery carries; nil
	// when the bytes go as they are (format bytes), when the record has
	// none (a tombstone), or when the body is to be encoded from Val
	// (map keys sorted, see the package doc).
	JSON []byte
	// Schema names the schema the value was decoded with (a URI), "" for
	// formats without one. It becomes the CloudEvents dataschema.
	Schema string
}

// Decoder decodes the bytes of one format. Schema Registry formats
// implement it with their schema lookups; it must be safe for concurrent
// use, and it must not wait: a schema not at hand yet is an error wrapping
// [ErrNotReady] (its fetch started in the background).
type Decoder interface {
	Decode(b []byte) (Decoded, error)
}

// Waiter is a Decoder that can wait until the schema b needs is at hand,
// bounded by ctx. Its error wraps ErrDecode when b cannot decode whatever
// the wait (a bad header, a schema id the registry does not know).
type Waiter interface {
	Wait(ctx context.Context, b []byte) error
}

// SchemaDecoders gives the decoder of a Schema Registry format; the node's
// registry client implements it.
type SchemaDecoders interface {
	Decoder(f Format) Decoder
}

// ErrDecode is wrapped by every error of a key or value that does not
// decode in its format: retrying cannot fix it.
var ErrDecode = errors.New("recordexpr: does not decode")

// ErrNotReady is wrapped by the error of a key or value whose schema is
// not at hand yet (being fetched, or the registry not answering): not a
// decoding failure, the record is to be tried again later.
var ErrNotReady = errors.New("recordexpr: schema not fetched yet")

// DecodeError is a key or value that does not decode.
type DecodeError struct {
	// Part is "key" or "value".
	Part   string
	Format Format
	Err    error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("%s is not %s: %v", e.Part, e.Format, e.Err)
}

// Unwrap returns ErrDecode and the decoder's error.
func (e *DecodeError) Unwrap() []error { return []error{ErrDecode, e.Err} }

// decoderFor returns the decoder of f, nil for bytes (handled without
// one, since bytes keys and values decode differently). A registry format
// without schemas (a node without a registry) decodes nothing: each
// record waits, never dead-lettered for the node's configuration.
func decoderFor(f Format, schemas SchemaDecoders) (Decoder, error) {
	switch f {
	case "", FormatBytes:
		return nil, nil
	case FormatJSON:
		return jsonDecoder{}, nil
	}
	if !NeedsRegistry(f) {
		return nil, fmt.Errorf("format %q is unknown", f)
	}
	if schemas == nil {
		return noRegistry{f}, nil
	}
	return schemas.Decoder(f), nil
}

// noRegistry is a registry format on a node without a registry.
type noRegistry struct{ f Format }

func (n noRegistry) Decode([]byte) (Decoded, error) {
	return Decoded{}, fmt.Errorf("%w: format %q needs a schema registry, and this node has none (--schema-registry-url)", ErrNotReady, n.f)
}

// jsonDecoder decodes JSON text: objects become maps, arrays lists,
// integers int (when they fit in 64 bits), other numbers double. A nil
// value (a tombstone) is null.
type jsonDecoder struct{}

func (jsonDecoder) Decode(b []byte) (Decoded, error) {
	if b == nil {
		return Decoded{Val: types.NullValue}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return Decoded{}, err
	}
	if len(bytes.TrimLeft(b[dec.InputOffset():], " \t\r\n")) > 0 {
		return Decoded{}, errors.New("data after the JSON value")
	}
	return Decoded{Val: types.DefaultTypeAdapter.NativeToValue(numbers(v)), JSON: b}, nil
}

// numbers replaces the json.Number values in v, in place: an integer that
// fits in int64 becomes int64 (so value.id == 12345678901234567 is exact),
// any other number float64.
func numbers(v any) any {
	switch t := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(t), 10, 64); err == nil {
			return i
		}
		f, _ := strconv.ParseFloat(string(t), 64)
		return f
	case map[string]any:
		for k, e := range t {
			t[k] = numbers(e)
		}
	case []any:
		for i, e := range t {
			t[i] = numbers(e)
		}
	}
	return v
}

// bytesKey is a key of format bytes as expressions see it: a string when
// it is UTF-8, so that key == 'customer-1' works, bytes otherwise, null
// when there is none.
func bytesKey(k []byte) ref.Val {
	switch {
	case k == nil:
		return types.NullValue
	case utf8.Valid(k):
		return types.String(k)
	}
	return types.Bytes(k)
}

// DecodeJSON decodes JSON text as format json does (see [Decoded]); the
// Schema Registry formats whose values are JSON use it.
func DecodeJSON(b []byte) (Decoded, error) { return jsonDecoder{}.Decode(b) }
