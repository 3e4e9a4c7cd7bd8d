package recordexpr

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/ext"
)

// Limits of an expression.
const (
	// CostLimit bounds one evaluation, in CEL cost units (about one per
	// operation; a string operation costs one per ten bytes it reads). An
	// evaluation that reaches it stops with an error: a few milliseconds
	// of CPU at most, whatever the record.
	CostLimit = 1_000_000
	// MaxExpressionLength is the longest expression, in bytes.
	MaxExpressionLength = 4096
	// EstimateRecordBytes is the record size the compile-time estimate
	// assumes for a key, a value and their strings, lists and maps; an
	// expression whose worst case over such a record exceeds CostLimit is
	// refused before it runs (a comprehension nested in another over the
	// value's lists, say). Larger records are still bounded by CostLimit
	// when they are evaluated.
	EstimateRecordBytes = 64 << 10
)

// Spec is what a subscription says about its records' expressions.
type Spec struct {
	// Filter, when not empty, is a CEL expression of type bool: a record
	// for which it is false is not delivered.
	Filter string
	// Transform, when not empty, is a CEL expression whose result, a map
	// (sent as JSON) or a string (sent as text), becomes the body.
	Transform string
	// ValueFormat and KeyFormat decode the value and the key; "" is
	// FormatBytes.
	ValueFormat Format
	KeyFormat   Format
}

// Empty reports whether s asks for nothing: no expression, bytes formats.
// Records then go as they are and need no Program.
func (s Spec) Empty() bool {
	return s.Filter == "" && s.Transform == "" && (s.ValueFormat == "" || s.ValueFormat == FormatBytes) &&
		(s.KeyFormat == "" || s.KeyFormat == FormatBytes)
}

// Error is a Spec that does not compile. Field names the subscription
// field at fault ("filter", "transform", "value_format" or "key_format");
// Message is CEL's message with the line and column, and the expression
// with a caret under the position.
type Error struct {
	Field   string
	Message string
}

func (e *Error) Error() string { return e.Field + ": " + e.Message }

// Program is a Spec compiled: type-checked, its cost bounded. It is safe
// for concurrent use.
type Program struct {
	spec       Spec
	key, value Decoder
	filter     cel.Program
	transform  cel.Program
}

// Option changes how Compile builds a Program.
type Option func(*options)

type options struct{ schemas SchemaDecoders }

// WithSchemas decodes the Schema Registry formats with d. Without it (or
// with nil) a Program of such a format type-checks but decodes nothing:
// every record's value is [ErrNotReady].
func WithSchemas(d SchemaDecoders) Option { return func(o *options) { o.schemas = d } }

// Compile type-checks s and builds its programs. Its error is an *Error
// naming the field at fault; when several are, the first in the order
// value_format, key_format, filter, transform.
func Compile(s Spec, opts ...Option) (*Program, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	p := &Program{spec: s}
	var err error
	if p.value, err = decoderFor(s.ValueFormat, o.schemas); err != nil {
		return nil, &Error{Field: "value_format", Message: err.Error()}
	}
	if p.key, err = decoderFor(s.KeyFormat, o.schemas); err != nil {
		return nil, &Error{Field: "key_format", Message: err.Error()}
	}
	env, err := newEnv(s)
	if err != nil {
		return nil, fmt.Errorf("recordexpr: environment: %w", err)
	}
	if s.Filter != "" {
		if p.filter, err = program(env, "filter", s.Filter, filterOutput); err != nil {
			return nil, err
		}
	}
	if s.Transform != "" {
		if p.transform, err = program(env, "transform", s.Transform, transformOutput); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Spec returns what p was compiled from.
func (p *Program) Spec() Spec { return p.spec }

// HasFilter reports whether p filters records.
func (p *Program) HasFilter() bool { return p.filter != nil }

// NeedsRegistry reports whether p decodes a key or value with schemas from
// a Schema Registry: its Filter may then answer [ErrNotReady] for a record
// whose schema is not at hand yet.
func (p *Program) NeedsRegistry() bool {
	return NeedsRegistry(p.spec.ValueFormat) || NeedsRegistry(p.spec.KeyFormat)
}

// Wait waits, bounded by ctx, until the schemas rec's key and value need
// are at hand, so that Filter and Render do not answer [ErrNotReady]. Its
// error wraps ErrDecode when a key or value cannot decode whatever the
// wait, else it is the registry's or ctx's.
func (p *Program) Wait(ctx context.Context, rec *Record) error {
	if w, ok := p.key.(Waiter); ok && rec.Key != nil {
		if err := w.Wait(ctx, rec.Key); err != nil {
			return waitError("key", p.spec.KeyFormat, err)
		}
	}
	if w, ok := p.value.(Waiter); ok && rec.Value != nil {
		if err := w.Wait(ctx, rec.Value); err != nil {
			return waitError("value", p.spec.ValueFormat, err)
		}
	}
	return nil
}

// waitError is err of a Waiter: a *DecodeError when the bytes cannot
// decode, else the wait's own (the registry's, ctx's).
func waitError(part string, f Format, err error) error {
	if errors.Is(err, ErrDecode) {
		return &DecodeError{Part: part, Format: f, Err: err}
	}
	return fmt.Errorf("%s: %w", part, err)
}

func newEnv(s Spec) (*cel.Env, error) {
	value, key := cel.BytesType, cel.DynType
	if s.ValueFormat != "" && s.ValueFormat != FormatBytes {
		value = cel.DynType
	}
	return cel.NewEnv(
		cel.Variable("key", key),
		cel.Variable("key_bytes", cel.BytesType),
		cel.Variable("headers", cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable("value", value),
		cel.Variable("topic", cel.StringType),
		cel.Variable("partition", cel.IntType),
		cel.Variable("offset", cel.IntType),
		cel.Variable("timestamp", cel.TimestampType),
		cel.OptionalTypes(),
		ext.Strings(),
		ext.Encoders(),
	)
}

// filterOutput and transformOutput check what an expression yields, as far
// as the checker knows it (dyn is checked at evaluation).
func filterOutput(t *cel.Type) string {
	if t.IsExactType(cel.BoolType) || t.IsExactType(cel.DynType) {
		return ""
	}
	return "must be a condition (type bool), not " + t.String()
}

func transformOutput(t *cel.Type) string {
	switch t.Kind() {
	case types.MapKind, types.StringKind, types.DynKind:
		return ""
	}
	return "must yield a map (sent as JSON) or a string (sent as text), not " + t.String()
}

// program compiles expr, the subscription's field, with its output
// checked by output and its estimated cost bounded.
func program(env *cel.Env, field, expr string, output func(*cel.Type) string) (cel.Program, error) {
	if strings.TrimSpace(expr) == "" {
		return nil, &Error{Field: field, Message: "must not be blank: leave it out instead"}
	}
	if len(expr) > MaxExpressionLength {
		return nil, &Error{Field: field, Message: fmt.Sprintf("must be at most %d bytes", MaxExpressionLength)}
	}
	ast, iss := env.CompileSource(common.NewStringSource(expr, field))
	if iss.Err() != nil {
		return nil, &Error{Field: field, Message: strings.TrimPrefix(iss.String(), "ERROR: ")}
	}
	if msg := output(ast.OutputType()); msg != "" {
		return nil, &Error{Field: field, Message: msg}
	}
	est, err := env.EstimateCost(ast, sizes{})
	if err != nil {
		return nil, &Error{Field: field, Message: "cost cannot be estimated: " + err.Error()}
	}
	if est.Max > CostLimit {
		return nil, &Error{Field: field, Message: fmt.Sprintf(
			"may cost up to %d units over a %d KiB record, more than the limit of %d: avoid nested comprehensions over the record's lists and maps",
			est.Max, EstimateRecordBytes>>10, CostLimit)}
	}
	prg, err := env.Program(ast, cel.CostLimit(CostLimit))
	if err != nil {
		return nil, &Error{Field: field, Message: err.Error()}
	}
	return prg, nil
}

// eval runs prg over a, its decoding errors first.
func eval(prg cel.Program, a *activation) (ref.Val, error) {
	out, _, err := prg.Eval(a)
	if a.err != nil {
		return nil, a.err
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Filter reports whether rec passes the filter (true when there is none).
// An error is either a *DecodeError (the key or value the filter reads does
// not decode) or the evaluation's (a missing field, a wrong type, the cost
// limit).
func (p *Program) Filter(rec *Record) (bool, error) {
	if p.filter == nil {
		return true, nil
	}
	out, err := eval(p.filter, &activation{p: p, rec: rec})
	if err != nil {
		return false, fmt.Errorf("filter: %w", err)
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("filter: yielded %s, not a bool", out.Type().TypeName())
	}
	return bool(b), nil
}

// Body is what a delivery sends of a record.
type Body struct {
	// Value is the body; nil for a tombstone.
	Value []byte
	// ContentType is the body's media type; "" leaves it to the
	// subscription and the record's headers (the bytes as they are).
	ContentType string
	// Schema names the schema the value was decoded with, "" when it had
	// none (see [Decoded]).
	Schema string
}

// Media types of the bodies Render makes.
const (
	ContentTypeJSON = "application/json"
	ContentTypeText = "text/plain; charset=utf-8"
)

// Render returns the body of rec: the transform's result when there is a
// transform, else the value, checked to decode in its format (JSON goes as
// it is, typed application/json). Its error wraps ErrDecode when the value
// does not decode; any error is final for the record.
func (p *Program) Render(rec *Record) (Body, error) {
	a := &activation{p: p, rec: rec}
	if p.transform == nil {
		if p.value == nil {
			return Body{Value: rec.Value}, nil
		}
		v := a.decodeValue()
		if a.err != nil {
			return Body{}, a.err
		}
		if rec.Value == nil {
			return Body{}, nil // a tombstone
		}
		b := a.valueJSON
		if b == nil {
			var err error
			if b, err = appendJSON(nil, v); err != nil {
				return Body{}, decodeError("value", p.spec.ValueFormat, err)
			}
		}
		return Body{Value: b, ContentType: ContentTypeJSON, Schema: a.valueSchema}, nil
	}
	out, err := eval(p.transform, a)
	if err != nil {
		return Body{}, fmt.Errorf("transform: %w", err)
	}
	if s, ok := out.(types.String); ok {
		return Body{Value: []byte(s), ContentType: ContentTypeText, Schema: a.valueSchema}, nil
	}
	if out.Type() != types.MapType {
		return Body{}, fmt.Errorf("transform: yielded %s, not a map or a string", out.Type().TypeName())
	}
	b, err := appendJSON(nil, out)
	if err != nil {
		return Body{}, fmt.Errorf("transform: %w", err)
	}
	return Body{Value: b, ContentType: ContentTypeJSON, Schema: a.valueSchema}, nil
}

// IsDecode reports whether err is a key or value that does not decode.
func IsDecode(err error) bool { return errors.Is(err, ErrDecode) }

// IsNotReady reports whether err is a key or value whose schema is not at
// hand yet: the record is to be tried again, not dead-lettered.
func IsNotReady(err error) bool { return errors.Is(err, ErrNotReady) }
