package http1

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

// fastHeadSeeds are answers the fast path reads and answers it leaves to
// net/http.
var fastHeadSeeds = []string{
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 204 No Content\r\nDate: x\r\n\r\n",
	"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 7 \r\nRetry-After: 9\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 200\r\ncontent-length:007\r\n\r\n1234567HTTP/1.1 204 No Content\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxy",
	"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n folded\r\n\r\nx",
	"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n",
	"HTTP/1.1 200 OK\r\nX: \x01\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\nContent-Length: 0\n\n",
	"HTTP/1.1 200 OK\r\n\r\nbody until close",
}

// Whenever the fast path reads an answer, net/http reads the same bytes
// the same way: status, whether the connection closes, Retry-After, the
// body, and where the next answer starts.
func FuzzFastHeadAgreesWithNetHTTP(f *testing.F) {
	for _, s := range fastHeadSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, answer []byte) {
		checkFastHeadAgrees(t, answer)
	})
}

func TestFastHeadAgreesWithNetHTTP(t *testing.T) {
	fast := 0
	for _, s := range fastHeadSeeds {
		if checkFastHeadAgrees(t, []byte(s)) {
			fast++
		}
	}
	if fast < 5 {
		t.Errorf("the fast path read %d of the seeds, want the 5 common answers at least", fast)
	}
}

// checkFastHeadAgrees compares the fast path's reading of answer with
// net/http's, when the fast path reads it, and says whether it did.
func checkFastHeadAgrees(t *testing.T, answer []byte) bool {
	t.Helper()
	br := bufio.NewReaderSize(bytes.NewReader(answer), readBufferSize)
	if _, err := br.Peek(1); err != nil {
		return false
	}
	h, ok := parseFastHead(br)
	if !ok {
		return false
	}
	if _, err := br.Discard(h.size); err != nil {
		t.Fatalf("%q: head of %d bytes not buffered: %v", answer, h.size, err)
	}
	body := make([]byte, h.length)
	if _, err := io.ReadFull(br, body); err != nil {
		return true // cut short: the fast path then fails the request, as net/http's body read would
	}
	rest, _ := io.ReadAll(br)

	nr := bufio.NewReader(bytes.NewReader(answer))
	resp, err := http.ReadResponse(nr, nil)
	if err != nil {
		t.Fatalf("%q: the fast path read status %d, net/http refuses it: %v", answer, h.status, err)
	}
	nbody, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%q: net/http's body read: %v", answer, err)
	}
	nrest, _ := io.ReadAll(nr)
	if resp.StatusCode != h.status || resp.Close != h.close || !bytes.Equal(nbody, body) || !bytes.Equal(nrest, rest) ||
		strings.TrimSpace(resp.Header.Get("Retry-After")) != h.retryAfter {
		t.Fatalf("%q:\nfast:     status %d close %v retry-after %q body %q rest %q\nnet/http: status %d close %v retry-after %q body %q rest %q",
			answer, h.status, h.close, h.retryAfter, body, rest,
			resp.StatusCode, resp.Close, resp.Header.Get("Retry-After"), nbody, nrest)
	}
	return true
}
