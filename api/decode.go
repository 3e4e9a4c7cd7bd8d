package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/keyhook/keyhook/subscription"
)

// readOnlyFields are the subscription fields the server sets. A request
// body naming one is refused with a validation problem that says so,
// rather than with "unknown field", which would mislead a client that
// sent back what it read.
var readOnlyFields = []string{"id", "created_at", "updated_at", "version"}

// decodeStrict decodes body, which must be exactly one JSON object, into
// dst (a pointer to a struct) the strict way: no unknown fields (each one
// named by its full path), no wrong types (the field named), nothing after
// the object. Top-level keys matching readOnly (case-insensitively, as
// encoding/json matches names) are not decoded; they come back as field
// errors for the caller to report with its own validation errors. It never
// panics, whatever the bytes.
func decodeStrict(body []byte, dst any, readOnly []string) ([]subscription.FieldError, *problem) {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 {
		return nil, newProblem(400, slugInvalidJSON, "request body is empty")
	}
	if trimmed[0] != '{' {
		return nil, newProblem(400, slugInvalidJSON, "request body must be a JSON object")
	}
	filtered, roErrs, p := dropKeys(body, readOnly)
	if p != nil {
		return nil, p
	}
	canon, p := canonical(filtered, reflect.TypeOf(dst).Elem())
	if p != nil {
		return nil, p
	}
	dec := json.NewDecoder(bytes.NewReader(canon))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return nil, decodeProblem(filtered, reflect.TypeOf(dst).Elem(), err)
	}
	return roErrs, nil
}

// dropKeys checks that body is one well-formed JSON object with nothing
// after it, and returns it without its top-level keys that match drop,
// other keys and values kept as written, in order.
func dropKeys(body []byte, drop []string) ([]byte, []subscription.FieldError, *problem) {
	dec := json.NewDecoder(bytes.NewReader(body))
	var obj []struct {
		key string
		val json.RawMessage
	}
	if _, err := dec.Token(); err != nil { // the '{' seen by the caller
		return nil, nil, syntaxProblem(err)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, syntaxProblem(err)
		}
		key, _ := tok.(string)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil, nil, syntaxProblem(err)
		}
		obj = append(obj, struct {
			key string
			val json.RawMessage
		}{key, val})
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, nil, syntaxProblem(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, nil, newProblem(400, slugInvalidJSON, "request body has data after the JSON object")
	}

	var errs []subscription.FieldError
	found := make(map[string]bool)
	var out bytes.Buffer
	out.WriteByte('{')
	for _, kv := range obj {
		if name, ok := matchName(drop, kv.key); ok {
			found[name] = true
			continue
		}
		if out.Len() > 1 {
			out.WriteByte(',')
		}
		k, _ := json.Marshal(kv.key)
		out.Write(k)
		out.WriteByte(':')
		out.Write(kv.val)
	}
	out.WriteByte('}')
	for _, name := range drop { // in the fixed order of drop, not the body's
		if found[name] {
			errs = append(errs, subscription.FieldError{Field: name, Message: "is read-only: the server sets it"})
		}
	}
	return out.Bytes(), errs, nil
}

func matchName(names []string, key string) (string, bool) {
	for _, n := range names {
		if strings.EqualFold(n, key) {
			return n, true
		}
	}
	return "", false
}

func syntaxProblem(err error) *problem {
	var syntaxErr *json.SyntaxError
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return newProblem(400, slugInvalidJSON, "request body ends in the middle of a JSON value")
	case errors.As(err, &syntaxErr):
		return newProblem(400, slugInvalidJSON, fmt.Sprintf("malformed JSON at byte %d: %s", syntaxErr.Offset, syntaxErr.Error()))
	default:
		return newProblem(400, slugInvalidJSON, "request body is not valid JSON")
	}
}

// decodeProblem explains a json.Decoder error on body, decoded into a
// value of type t, in the client's terms, naming the field whenever the
// decoder knows it.
func decodeProblem(body []byte, t reflect.Type, err error) *problem {
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF), errors.As(err, &syntaxErr):
		return syntaxProblem(err)
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			return newProblem(400, slugInvalidJSON, "request body must be a JSON object")
		}
		ft := typeAt(t, typeErr.Field)
		msg := "must be " + kindOf(ft)
		if strings.HasPrefix(typeErr.Value, "number") && isInteger(ft) {
			msg = "must be a whole number within range"
		}
		return newProblem(400, slugInvalidJSON,
			fmt.Sprintf("field %s has the wrong JSON type (%s)", typeErr.Field, typeErr.Value),
			subscription.FieldError{Field: typeErr.Field, Message: msg})
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		paths := unknownFields(body, schemaOf(t), "")
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

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
)

// jsonFields maps the JSON names of struct type t's fields to their
// types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := make(map[string]reflect.Type)
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

// typeAt follows a decoder field path such as "endpoint.timeout_ms" or
// "offsets.partition" (array indexes are not in it) from t, or returns nil.
func typeAt(t reflect.Type, path string) reflect.Type {
	for _, part := range strings.Split(path, ".") {
		for t != nil && (t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice && t != rawType) {
			t = t.Elem()
		}
		if t == nil || t.Kind() != reflect.Struct || t == timeType {
			return nil
		}
		var next reflect.Type
		for name, ft := range jsonFields(t) {
			if strings.EqualFold(name, part) {
				next = ft
				break
			}
		}
		t = next
	}
	return t
}

// kindOf says in a client's words what JSON a value of type t must be.
func kindOf(t reflect.Type) string {
	if t == nil {
		return "of another type"
	}
	switch {
	case t == timeType:
		return "an RFC 3339 time string"
	case t == rawType:
		return "a JSON value"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return kindOf(t.Elem())
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		switch e := t.Elem(); {
		case e.Kind() == reflect.String:
			return "an array of strings"
		case isInteger(e):
			return "an array of integers"
		default:
			return "an array of objects"
		}
	default:
		return "an object"
	}
}

func isInteger(t reflect.Type) bool {
	if t == nil {
		return false
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

// schema mirrors a request type's JSON shape for naming unknown fields by
// their full path, which encoding/json does not: fields maps the keys of
// an object (nil for a value that is not one), elem describes the
// elements of an array of objects, and open marks a value that takes any
// keys (a map or raw JSON).
type schema struct {
	fields map[string]*schema
	elem   *schema
	open   bool
}

func schemaOf(t reflect.Type) *schema {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == timeType:
		return nil
	case t == rawType || t.Kind() == reflect.Map || t.Kind() == reflect.Interface:
		return &schema{open: true}
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		if e := schemaOf(t.Elem()); e != nil {
			return &schema{elem: e}
		}
		return nil
	case t.Kind() == reflect.Struct:
		s := &schema{fields: make(map[string]*schema)}
		for name, ft := range jsonFields(t) {
			s.fields[name] = schemaOf(ft)
		}
		return s
	default:
		return nil
	}
}

// lookup finds key among s's fields as encoding/json does: exactly, else
// case-insensitively.
func (s *schema) lookup(key string) (string, *schema, bool) {
	if child, ok := s.fields[key]; ok {
		return key, child, true
	}
	for k, child := range s.fields {
		if strings.EqualFold(k, key) {
			return k, child, true
		}
	}
	return "", nil, false
}

// unknownFields lists, in document order, the paths of keys in the JSON
// value raw that s does not define. It gives up quietly on anything
// malformed: the decoder has already judged the syntax.
func unknownFields(raw []byte, s *schema, path string) []string {
	if s == nil || s.open {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil
	}
	var out []string
	switch {
	case tok == json.Delim('[') && s.elem != nil:
		for i := 0; dec.More(); i++ {
			var val json.RawMessage
			if err := dec.Decode(&val); err != nil {
				return out
			}
			out = append(out, unknownFields(val, s.elem, path+"["+strconv.Itoa(i)+"]")...)
		}
	case tok == json.Delim('{') && s.fields != nil:
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
			if _, child, known := s.lookup(key); !known {
				out = append(out, p)
			} else {
				out = append(out, unknownFields(val, child, p)...)
			}
		}
	}
	return out
}

// canonical rewrites body, a well-formed JSON value to be decoded into a
// value of type t, the way JSON Schema reads it, which encoding/json does
// not: a number with an integral value (0.0, 1e2) is an integer, written
// as one where t wants an integer; and null is a value of its own type,
// not "absent", so a null anywhere but inside free-form JSON is refused
// (the spec allows null only in merge patches, which remove their nulls
// before decoding). Keys and values are kept in their order; unknown keys
// are copied as written, for the decoder to name.
func canonical(body []byte, t reflect.Type) ([]byte, *problem) {
	c := canonicalizer{dec: json.NewDecoder(bytes.NewReader(body))}
	c.dec.UseNumber()
	if err := c.value(t, ""); err != nil {
		return body, nil // malformed after all: the decoder will say how
	}
	if len(c.nulls) > 0 {
		errs := make([]subscription.FieldError, len(c.nulls))
		for i, f := range c.nulls {
			errs[i] = subscription.FieldError{Field: f, Message: "must not be null"}
		}
		return nil, newProblem(400, slugInvalidJSON, "null is not a value of "+strings.Join(c.nulls, ", ")+
			"; leave a field out to get its default", errs...)
	}
	return c.out.Bytes(), nil
}

type canonicalizer struct {
	dec   *json.Decoder
	out   bytes.Buffer
	nulls []string
}

// value copies the next JSON value, to be decoded into t (nil when
// unknown), at path.
func (c *canonicalizer) value(t reflect.Type, path string) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t == rawType || t.Kind() == reflect.Interface {
		var raw json.RawMessage
		if err := c.dec.Decode(&raw); err != nil {
			return err
		}
		c.out.Write(raw)
		return nil
	}
	tok, err := c.dec.Token()
	if err != nil {
		return err
	}
	switch v := tok.(type) {
	case json.Delim:
		return c.container(v, t, path)
	case nil:
		c.nulls = append(c.nulls, path)
		c.out.WriteString("null")
	case json.Number:
		s := string(v)
		if isInteger(t) {
			if n, ok := integral(s); ok {
				s = n
			}
		}
		c.out.WriteString(s)
	case string:
		b, _ := json.Marshal(v)
		c.out.Write(b)
	case bool:
		c.out.WriteString(strconv.FormatBool(v))
	}
	return nil
}

// container copies the object or array opened by delim.
func (c *canonicalizer) container(delim json.Delim, t reflect.Type, path string) error {
	var fields map[string]reflect.Type
	var elem reflect.Type
	switch {
	case t.Kind() == reflect.Struct && t != timeType:
		fields = jsonFields(t)
	case t.Kind() == reflect.Map, t.Kind() == reflect.Slice, t.Kind() == reflect.Array:
		elem = t.Elem()
	}
	if delim == '[' {
		if fields != nil || t.Kind() == reflect.Map {
			elem = nil
		}
		c.out.WriteByte('[')
		for i := 0; c.dec.More(); i++ {
			if i > 0 {
				c.out.WriteByte(',')
			}
			if err := c.value(elem, path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
		c.out.WriteByte(']')
		_, err := c.dec.Token()
		return err
	}
	if t.Kind() != reflect.Map {
		elem = nil
	}
	c.out.WriteByte('{')
	for i := 0; c.dec.More(); i++ {
		tok, err := c.dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		if i > 0 {
			c.out.WriteByte(',')
		}
		b, _ := json.Marshal(key)
		c.out.Write(b)
		c.out.WriteByte(':')
		ft, name := elem, key
		for n, f := range fields {
			if n == key || ft == nil && strings.EqualFold(n, key) {
				ft, name = f, n
			}
		}
		if path != "" {
			name = path + "." + name
		}
		if err := c.value(ft, name); err != nil {
			return err
		}
	}
	c.out.WriteByte('}')
	_, err := c.dec.Token()
	return err
}

// integral returns the JSON number s as an integer literal when its value
// is a whole number, as JSON Schema's "integer" accepts it (1.0, 1e2).
// Numbers with huge exponents are left alone: they are out of every
// range, and expanding them would cost memory.
func integral(s string) (string, bool) {
	if !strings.ContainsAny(s, ".eE") || len(s) > 64 {
		return "", false
	}
	mant, exp, hasExp := strings.Cut(strings.ToLower(s), "e")
	if hasExp {
		e, err := strconv.Atoi(exp)
		if err != nil {
			return "", false
		}
		if strings.Trim(mant, "-+0.") == "" {
			return "0", true
		}
		if e > 30 || e < -30 {
			return "", false
		}
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok || !r.IsInt() {
		return "", false
	}
	return r.Num().String(), true
}

// decodeSubscription decodes a create or replace body into a
// subscription, not yet validated, and the errors of the read-only fields
// it names; or into the problem to answer with.
func decodeSubscription(body []byte) (*subscription.Subscription, []subscription.FieldError, *problem) {
	var sub subscription.Subscription
	roErrs, p := decodeStrict(body, &sub, readOnlyFields)
	if p != nil {
		return nil, nil, p
	}
	return &sub, roErrs, nil
}

// finish normalizes sub and returns the validation problem of its fields
// and of roErrs, or nil when there is none. A format decoded with a
// Schema Registry's schemas is refused when the node has none
// (registry false).
func finish(sub *subscription.Subscription, roErrs []subscription.FieldError, registry bool) *problem {
	sub.Normalize()
	errs := append(append([]subscription.FieldError(nil), roErrs...), sub.Validate()...)
	if !registry {
		for _, f := range sub.NeedsSchemaRegistry() {
			errs = append(errs, subscription.FieldError{Field: f,
				Message: "needs a schema registry, and this node has none: start keyhook with --schema-registry-url (KEYHOOK_SCHEMA_REGISTRY_URL)"})
		}
	}
	if len(errs) > 0 {
		return validationProblem(errs)
	}
	return nil
}

func validationProblem(errs []subscription.FieldError) *problem {
	detail := "1 field is invalid"
	if len(errs) > 1 {
		detail = strconv.Itoa(len(errs)) + " fields are invalid"
	}
	return newProblem(400, slugValidation, detail, errs...)
}
