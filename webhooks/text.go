package webhooks

import (
	"mime"
	"strconv"
	"strings"
	"unicode/utf8"
)

// isToken reports whether s is an HTTP token (RFC 9110, section 5.6.2), the
// syntax of a header name.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTokenByte(s[i]) {
			return false
		}
	}
	return true
}

func isTokenByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// headerSafe reports whether b can travel as an HTTP header value: valid
// UTF-8 without control characters other than tab.
func headerSafe(b []byte) bool {
	return utf8.Valid(b) && !hasControl(b)
}

// headerSafeString is headerSafe for a string.
func headerSafeString(s string) bool {
	return utf8.ValidString(s) && !hasControl(s)
}

// headerExact reports whether b can travel as an HTTP header value and
// reach the endpoint unchanged: headerSafe, without the leading or trailing
// white space that receivers trim.
func headerExact(b []byte) bool {
	return headerSafe(b) && (len(b) == 0 || !isSpace(b[0]) && !isSpace(b[len(b)-1]))
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' }

// hasControl reports whether s holds a control character other than tab:
// such a character in a header value could end the header (CR, LF) or be
// refused by the transport.
func hasControl[T ~string | ~[]byte](s T) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return true
		}
	}
	return false
}

// isText reports whether b reads as text: valid UTF-8 whose only control
// characters are tab, carriage return and line feed. Text travels in JSON
// as a string; anything else travels as base64.
func isText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, c := range b {
		if c < 0x20 && c != '\t' && c != '\n' && c != '\r' || c == 0x7f {
			return false
		}
	}
	return true
}

// isCEString reports whether s is a valid CloudEvents String: UTF-8 without
// the C0 and C1 control characters (CloudEvents 1.0, "Type System").
func isCEString(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r <= 0x1f || r >= 0x7f && r <= 0x9f {
			return false
		}
	}
	return true
}

// isJSONMediaType reports whether ct names JSON: application/json,
// text/json or any +json structured suffix, parameters ignored.
func isJSONMediaType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json")
}

// maxErrorText bounds the text of an attempt's error: it may quote what
// the endpoint sent, and it travels into logs, API answers and
// dead-letter headers.
const maxErrorText = 512

// cleanError returns err with a text fit to show: bounded, printable,
// and free of the formatting slips of net/http, whose "connection
// broken" error after unsolicited bytes formats a nil cause
// ("readLoopPeekFailLocked: %!w(<nil>)"). The error still unwraps to err.
func cleanError(err error) error {
	msg := err.Error()
	clean := cleanText(msg)
	if clean == msg {
		return err
	}
	return &textError{msg: clean, err: err}
}

// cleanText is cleanError's text.
func cleanText(s string) string {
	if strings.Contains(s, "%!") {
		s = strings.ReplaceAll(s, "readLoopPeekFailLocked: %!w(<nil>)", "the endpoint sent bytes nobody asked for")
		s = strings.ReplaceAll(s, "%!w(<nil>)", "unknown cause")
	}
	if len(s) <= maxErrorText && utf8.ValidString(s) && !hasControl(s) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= maxErrorText {
			b.WriteString("...")
			break
		}
		switch {
		case r == utf8.RuneError:
			b.WriteByte('?')
		case r < 0x20 || r == 0x7f:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatInt(int64(r)>>4, 16))
			b.WriteString(strconv.FormatInt(int64(r)&15, 16))
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// textError is an error shown with another text than its own.
type textError struct {
	msg string
	err error
}

func (e *textError) Error() string { return e.msg }
func (e *textError) Unwrap() error { return e.err }
