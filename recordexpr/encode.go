package recordexpr

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
)

// maxDepth bounds the nesting appendJSON follows.
const maxDepth = 64

// appendJSON appends v as JSON to dst: map keys sorted (the same record
// always makes the same body, hence the same signature), integers exact,
// bytes in standard base64, timestamps in RFC 3339, durations as seconds
// with an "s" (as protobuf's JSON mapping writes them).
func appendJSON(dst []byte, v ref.Val) ([]byte, error) { return appendValue(dst, v, 0) }

// EncodeJSON is v as JSON, as a body is encoded from a decoded value.
func EncodeJSON(v ref.Val) ([]byte, error) { return appendJSON(nil, v) }

func appendValue(dst []byte, v ref.Val, depth int) ([]byte, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("result is nested more than %d deep", maxDepth)
	}
	switch t := v.(type) {
	case types.Null:
		return append(dst, "null"...), nil
	case types.Bool:
		return strconv.AppendBool(dst, bool(t)), nil
	case types.Int:
		return strconv.AppendInt(dst, int64(t), 10), nil
	case types.Uint:
		return strconv.AppendUint(dst, uint64(t), 10), nil
	case types.Double:
		f := float64(t)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, errors.New("result holds a number JSON cannot carry (NaN or infinity)")
		}
		return strconv.AppendFloat(dst, f, 'g', -1, 64), nil
	case types.String:
		return appendString(dst, string(t)), nil
	case types.Bytes:
		return appendString(dst, base64.StdEncoding.EncodeToString(t)), nil
	case types.Timestamp:
		return appendString(dst, t.UTC().Format(time.RFC3339Nano)), nil
	case types.Duration:
		return appendString(dst, strconv.FormatFloat(t.Seconds(), 'f', -1, 64)+"s"), nil
	case *types.Err:
		return nil, t
	}
	switch {
	case v.Type() == types.MapType:
		return appendMap(dst, v.(traits.Mapper), depth)
	case v.Type() == types.ListType:
		return appendList(dst, v.(traits.Lister), depth)
	case v.Type() == types.OptionalType:
		o := v.(*types.Optional)
		if !o.HasValue() {
			return append(dst, "null"...), nil
		}
		return appendValue(dst, o.GetValue(), depth)
	}
	return nil, fmt.Errorf("result holds a %s, which JSON cannot carry", v.Type().TypeName())
}

func appendMap(dst []byte, m traits.Mapper, depth int) ([]byte, error) {
	var keys []string
	for it := m.Iterator(); it.HasNext() == types.True; {
		k, ok := it.Next().(types.String)
		if !ok {
			return nil, errors.New("result has a map key that is not a string")
		}
		keys = append(keys, string(k))
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, k)
		dst = append(dst, ':')
		var err error
		if dst, err = appendValue(dst, m.Get(types.String(k)), depth+1); err != nil {
			return nil, err
		}
	}
	return append(dst, '}'), nil
}

func appendList(dst []byte, l traits.Lister, depth int) ([]byte, error) {
	dst = append(dst, '[')
	n, _ := l.Size().(types.Int)
	for i := types.Int(0); i < n; i++ {
		if i > 0 {
			dst = append(dst, ',')
		}
		var err error
		if dst, err = appendValue(dst, l.Get(i), depth+1); err != nil {
			return nil, err
		}
	}
	return append(dst, ']'), nil
}

func appendString(dst []byte, s string) []byte {
	b, _ := json.Marshal(s) // a string always marshals
	return append(dst, b...)
}
