package connect

import (
	"errors"
	"fmt"
)

// FieldError is a configuration error of one field of a KafkaConfig or
// RedisConfig. Callers that read the fields from flags use Field to name the
// flag; errors.As finds it through any wrapping.
type FieldError struct {
	// Field is the name of the field at fault, as spelled in the struct,
	// such as "TLSCertFile".
	Field string
	// Err says what is wrong with it.
	Err error
}

// Error returns "connect: <Field>: <Err>".
func (e *FieldError) Error() string { return "connect: " + e.Field + ": " + e.Err.Error() }

// Unwrap returns the underlying error.
func (e *FieldError) Unwrap() error { return e.Err }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
}

func fieldWrap(field string, err error) error {
	return &FieldError{Field: field, Err: err}
}

// errCertWithoutKey and errKeyWithoutCert are the halves of an incomplete
// client certificate; they are the same for Kafka and Redis.
var (
	errCertWithoutKey = errors.New("is set without the matching key file")
	errKeyWithoutCert = errors.New("is set without the matching certificate file")
)
