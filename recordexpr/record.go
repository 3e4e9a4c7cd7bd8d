package recordexpr

import (
	"errors"
	"fmt"
	"iter"
	"time"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/interpreter"
)

// Record is one record as expressions see it, before decoding.
type Record struct {
	// Key is the record key; nil means none.
	Key []byte
	// Value is the record value; nil is a tombstone.
	Value []byte
	// Headers yields the record's headers in order; nil means none.
	Headers   iter.Seq2[string, []byte]
	Topic     string
	Partition int32
	Offset    int64
	Timestamp time.Time
}

// activation resolves the variables of one evaluation over rec, each
// computed when an expression first reads it: a filter on the key alone
// never decodes the value. It belongs to one evaluation.
type activation struct {
	p   *Program
	rec *Record
	// key and value, once decoded; err is the first decoding error.
	key, value  ref.Val
	valueJSON   []byte
	valueSchema string
	err         error
}

func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case "key":
		if a.key == nil {
			a.key = a.decodeKey()
		}
		return a.key, true
	case "key_bytes":
		return types.Bytes(a.rec.Key), true
	case "value":
		if a.value == nil {
			a.value = a.decodeValue()
		}
		return a.value, true
	case "headers":
		return types.NewStringStringMap(types.DefaultTypeAdapter, headerMap(a.rec.Headers)), true
	case "topic":
		return types.String(a.rec.Topic), true
	case "partition":
		return types.Int(a.rec.Partition), true
	case "offset":
		return types.Int(a.rec.Offset), true
	case "timestamp":
		return types.Timestamp{Time: a.rec.Timestamp}, true
	}
	return nil, false
}

func (a *activation) Parent() interpreter.Activation { return nil }

func (a *activation) decodeKey() ref.Val {
	if a.p.key == nil {
		return bytesKey(a.rec.Key)
	}
	d, err := a.p.key.Decode(a.rec.Key)
	if err != nil {
		return a.fail(decodeError("key", a.p.spec.KeyFormat, err))
	}
	return d.Val
}

func (a *activation) decodeValue() ref.Val {
	if a.p.value == nil {
		if a.rec.Value == nil {
			return types.Bytes{}
		}
		return types.Bytes(a.rec.Value)
	}
	if a.value != nil {
		return a.value
	}
	d, err := a.p.value.Decode(a.rec.Value)
	if err != nil {
		return a.fail(decodeError("value", a.p.spec.ValueFormat, err))
	}
	a.value, a.valueJSON, a.valueSchema = d.Val, d.JSON, d.Schema
	return d.Val
}

// decodeError is err of a key or value: a *DecodeError, unless the schema
// is only not at hand yet, which is no decoding failure.
func decodeError(part string, f Format, err error) error {
	if errors.Is(err, ErrNotReady) {
		return fmt.Errorf("%s: %w", part, err)
	}
	return &DecodeError{Part: part, Format: f, Err: err}
}

// fail keeps err as the evaluation's error and returns it as a CEL error,
// which ends the evaluation.
func (a *activation) fail(err error) ref.Val {
	if a.err == nil {
		a.err = err
	}
	return types.WrapErr(err)
}

// headerMap is headers by name, the last value of a repeated name winning
// (as the envelope format does).
func headerMap(hs iter.Seq2[string, []byte]) map[string]string {
	m := make(map[string]string)
	if hs != nil {
		for k, v := range hs {
			m[k] = string(v)
		}
	}
	return m
}
