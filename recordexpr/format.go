package recordexpr

import (
	"bytes"
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
)

// Formats are every format a subscription may name; Supported says which
// of them this build decodes.
var Formats = []Format{FormatBytes, FormatJSON, "avro", "protobuf", "json_schema"}

// Supported reports whether f ("" meaning bytes) can be decoded.
func Supported(f Format) bool { return f == "" || f == FormatBytes || f == FormatJSON }

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
	// when the bytes go as they are (format bytes) or the record has none
	// (a tombstone).
	JSON []byte
}

// Decoder decodes the bytes of one format. Schema Registry formats
// implement it with their schema lookups; it must be safe for concurrent
// use.
type Decoder interface {
	Decode(b []byte) (Decoded, error)
}

// ErrDecode is wrapped by every error of a key or value that does not
// decode in its format: retrying cannot fix it.
var ErrDecode = errors.New("recordexpr: does not decode")

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
// one, since bytes keys and values decode differently).
func decoderFor(f Format) (Decoder, error) {
	switch f {
	case "", FormatBytes:
		return nil, nil
	case FormatJSON:
		return jsonDecoder{}, nil
	}
	return nil, fmt.Errorf("format %q is not supported yet", f)
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
