package webhooks

import (
	"errors"
	"io"
	"strings"
	"testing"
	"unicode/utf8"
)

// An attempt's error reaches logs and keyhook-last-error: net/http's
// formatting slip after unsolicited bytes is said in words, and what an
// endpoint sent, quoted in an error, arrives printable and bounded.
func TestAttemptErrorTextsAreCleanAndBounded(t *testing.T) {
	slip := cleanError(errors.New("net/http: HTTP/1.x transport connection broken: readLoopPeekFailLocked: %!w(<nil>)"))
	if got, want := slip.Error(), "net/http: HTTP/1.x transport connection broken: the endpoint sent bytes nobody asked for"; got != want {
		t.Errorf("net/http's slip reads %q, want %q", got, want)
	}
	cause := io.ErrUnexpectedEOF
	quoted := cleanError(&textError{msg: "malformed MIME header line: \x1b[31m\xff" + strings.Repeat("a", 1<<20), err: cause})
	msg := quoted.Error()
	if len(msg) > maxErrorText+8 || !utf8.ValidString(msg) || hasControl(msg) {
		t.Errorf("an endpoint's bytes in an error: %d bytes, valid UTF-8 %v, control characters %v", len(msg), utf8.ValidString(msg), hasControl(msg))
	}
	if !errors.Is(quoted, cause) {
		t.Error("the cleaned error no longer unwraps to its cause")
	}
	if plain := errors.New("dial tcp 192.0.2.1:80: connection refused"); cleanError(plain) != plain {
		t.Error("a clean error was wrapped")
	}
}
