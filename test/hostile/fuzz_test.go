package hostile_test

import (
	"bytes"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/keyhook/keyhook/webhooks"
)

// FuzzAnAnswerIsOnlyTakenForItsRequest scripts an endpoint that refuses
// every request: its answer to the n-th starts with a 503 status line,
// and the n-th segment of the input (segments split at NUL) follows —
// headers, a body, and whatever bytes behind it, forged answers
// included. Whatever the bytes, an attempt either fails or reads that
// 503: an answer is only ever taken for the request it followed, and a
// refused record is never acked. The http1 client must hold to it;
// net/http's pool race (see wrongAnswer) is logged. Answers cut short
// wait for a short attempt timeout:
//
//	go test ./test/hostile -run '^$' -fuzz FuzzAnAnswerIsOnlyTakenForItsRequest -fuzztime 2m
func FuzzAnAnswerIsOnlyTakenForItsRequest(f *testing.F) {
	for _, s := range []string{
		"Content-Length: 4\r\n\r\nnope" + forged,
		"Transfer-Encoding: chunked\r\n\r\n4\r\nnope\r\n0\r\n\r\n" + forged,
		"Content-Length: 0\r\n\r\n" + forged + forged + "\x00Content-Length: 0\r\n\r\n",
		"Content-Length: 0\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n" + forged,
		"Content-Length: 0\r\nContent-Length: 0\r\n\r\n" + forged,
		"Connection: keep-alive\r\n\r\n" + forged,
		"\r\n" + forged + "\x00\r\n\x00\r\n",
		"Content-Length: 2\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, script []byte) {
		segments := bytes.Split(script, []byte{0})
		ep := serve(t, func(n int, _ *http.Request) reply {
			if n > len(segments) {
				return reply{answer: refusal}
			}
			return reply{answer: "HTTP/1.1 503 Refused\r\n" + string(segments[n-1])}
		})
		for _, tr := range transports {
			c := newClient(t, tr.netHTTP, webhooks.ClientConfig{Timeout: 200 * time.Millisecond})
			for i := range 3 {
				a := send(c, ep.url("/hook"), tr.name+"-"+strconv.Itoa(i), 1)
				if a.Status != 0 && a.Status != http.StatusServiceUnavailable {
					wrongAnswer(t, tr.netHTTP, "%s, request %d: status %d, body %q; every answer began with 503", tr.name, i+1, a.Status, a.Body)
				}
			}
			c.CloseIdleConnections()
		}
	})
}
