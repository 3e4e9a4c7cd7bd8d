package webhooks_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/keyhook/keyhook/webhooks"
)

// TestAnAttemptKeepsTheResponsesContentType holds both transports to the
// same answer: the Content-Type as sent, a long one cut to 128 bytes, none
// when absent.
func TestAnAttemptKeepsTheResponsesContentType(t *testing.T) {
	long := "application/vnd." + strings.Repeat("x", 200)
	for _, tt := range []struct {
		sent, want string
	}{
		{"application/problem+json", "application/problem+json"},
		{"text/csv; charset=latin1", "text/csv; charset=latin1"},
		{long, long[:128]},
		{"", ""},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			if tt.sent != "" {
				w.Header().Set("Content-Type", tt.sent)
			} else {
				w.Header()["Content-Type"] = nil // no sniffing either
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "busy")
		}))
		for _, netHTTP := range []bool{false, true} {
			c, err := webhooks.NewClient(webhooks.ClientConfig{Policy: webhooks.AddressPolicy{AllowPrivate: true}, NetHTTPOnly: netHTTP})
			if err != nil {
				t.Fatal(err)
			}
			a := c.Send(context.Background(), &webhooks.Request{URL: srv.URL, Body: []byte("{}")}, 1)
			if a.Status != 503 || a.ContentType != tt.want {
				t.Errorf("net/http %v, Content-Type %.30q: attempt status %d content type %.30q, want 503 and %.30q", netHTTP, tt.sent, a.Status, a.ContentType, tt.want)
			}
			c.CloseIdleConnections()
		}
		srv.Close()
	}
}
