package http1

import (
	"bufio"
	"bytes"

	"golang.org/x/net/http/httpguts"
)

// head is what an answer's status line and headers say, as far as an
// attempt needs it.
type head struct {
	status int
	// length is the body's Content-Length; 0 for a 204 or 304.
	length int64
	// close reports that the endpoint closes the connection after it.
	close       bool
	retryAfter  string
	contentType string
	// size is the bytes of the status line and headers.
	size int
}

// maxFastHeadLines bounds the header lines the fast path reads.
const maxFastHeadLines = 64

// parseFastHead parses the common answer from what br has buffered,
// without consuming it: an HTTP/1.1 final status, well-formed header lines
// ending in CRLF, and a body of a known Content-Length (or none, for a 204
// or 304). ok is false for anything else — an answer not yet whole in the
// buffer, HTTP/1.0, 1xx, chunked or length-less bodies, repeated or
// malformed framing headers, obsolete line folding — which net/http's
// reader then reads, so every answer is read exactly as net/http reads it
// (FuzzFastHeadAgreesWithNetHTTP).
func parseFastHead(br *bufio.Reader) (h head, ok bool) {
	buf, _ := br.Peek(br.Buffered())
	end := bytes.Index(buf, []byte("\r\n\r\n"))
	if end < 0 {
		return head{}, false
	}
	h.size = end + 4
	buf = buf[:end+2] // every line with its CRLF
	line, buf, _ := bytes.Cut(buf, []byte("\r\n"))
	// "HTTP/1.1 200 OK": the version, a space, three digits, then a
	// space and the reason or nothing.
	if len(line) < 12 || string(line[:9]) != "HTTP/1.1 " || len(line) > 12 && line[12] != ' ' || !textOnly(line) {
		return head{}, false
	}
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return head{}, false
		}
		h.status = h.status*10 + int(c-'0')
	}
	if h.status < 200 || h.status > 599 {
		return head{}, false
	}
	h.length = -1
	for n := 0; len(buf) > 0; n++ {
		if n == maxFastHeadLines {
			return head{}, false
		}
		line, buf, _ = bytes.Cut(buf, []byte("\r\n"))
		name, value, found := bytes.Cut(line, []byte(":"))
		if !found || !tokenOnly(name) || !textOnly(value) {
			return head{}, false // obsolete folding starts with a space: not a token
		}
		value = bytes.Trim(value, " \t")
		switch {
		case asciiEqualFold(name, "content-length"):
			if h.length >= 0 || len(value) == 0 || len(value) > 15 {
				return head{}, false
			}
			var l int64
			for _, c := range value {
				if c < '0' || c > '9' {
					return head{}, false
				}
				l = l*10 + int64(c-'0')
			}
			h.length = l
		case asciiEqualFold(name, "transfer-encoding"):
			return head{}, false
		case asciiEqualFold(name, "connection"):
			for tok := range bytes.SplitSeq(value, []byte(",")) {
				if asciiEqualFold(bytes.Trim(tok, " \t"), "close") {
					h.close = true
				}
			}
		case asciiEqualFold(name, "retry-after"):
			if h.retryAfter == "" {
				h.retryAfter = string(value)
			}
		case asciiEqualFold(name, "content-type"):
			if h.contentType == "" {
				h.contentType = internContentType(value)
			}
		}
	}
	if h.status == 204 || h.status == 304 {
		if h.length > 0 {
			return head{}, false
		}
		h.length = 0
	}
	if h.length < 0 {
		return head{}, false
	}
	return h, true
}

// textOnly reports a line free of control characters other than tab.
func textOnly(b []byte) bool {
	for _, c := range b {
		if c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

func tokenOnly(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !httpguts.IsTokenRune(rune(c)) {
			return false
		}
	}
	return true
}

// asciiEqualFold compares b with lower, a lower-case ASCII name.
func asciiEqualFold(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// commonContentTypes are answered without an allocation: every answer
// with a body names one, and the delivery log keeps it.
var commonContentTypes = []string{
	"application/json", "application/json; charset=utf-8", "text/plain", "text/plain; charset=utf-8",
	"text/html", "text/html; charset=utf-8", "application/problem+json", "application/xml",
}

// maxContentType bounds a Content-Type kept.
const maxContentType = 128

// internContentType is value as a string, one of commonContentTypes when
// it is one, cut to maxContentType bytes.
func internContentType(value []byte) string {
	for _, c := range commonContentTypes {
		if string(value) == c {
			return c
		}
	}
	if len(value) > maxContentType {
		value = value[:maxContentType]
	}
	return string(value)
}
