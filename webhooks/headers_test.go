package webhooks_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keyhook/keyhook/webhooks"
)

// Send shares the request's header values with the attempt rather than
// copying them; every attempt must still leave them as the caller gave
// them, whatever the signature, credentials and trace context add.
func TestSendLeavesTheRequestHeadersAsTheCallerGaveThem(t *testing.T) {
	ep := newEndpoint(t, statuses(http.StatusNoContent))
	c := newClient(t, webhooks.ClientConfig{})
	secret, err := webhooks.GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	sec, err := webhooks.ParseSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	multi := make([]string, 2, 8) // room to append in place
	multi[0], multi[1] = "a", "b"
	req := &webhooks.Request{
		URL:  ep.URL + "/hook",
		Body: []byte(`{}`),
		Header: http.Header{
			"Keyhook-Topic": {"orders"},
			"X-Multi":       multi,
			"Traceparent":   {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		},
		DeliveryID: "dlv_1",
		Signer:     &webhooks.Signer{Secrets: []webhooks.Secret{sec}},
		Auth:       &webhooks.Auth{Headers: map[string]string{"X-Api-Key": "k"}, BearerToken: "t"},
	}
	before := req.Header.Clone()

	for n := 1; n <= 3; n++ {
		if a := c.Send(context.Background(), req, n); a.Err != nil || a.Status != http.StatusNoContent {
			t.Fatalf("attempt %d: status %d, err %v", n, a.Status, a.Err)
		}
	}

	if diff := cmp.Diff(before, req.Header); diff != "" {
		t.Errorf("request headers after three attempts (-before +after):\n%s", diff)
	}
	if got := multi[:cap(multi)][2]; got != "" {
		t.Errorf("a value was appended into the caller's array: %q", got)
	}
	for i, r := range ep.requests() {
		if got := r.Header.Get("Keyhook-Attempt"); got != []string{"1", "2", "3"}[i] {
			t.Errorf("request %d: Keyhook-Attempt %q", i+1, got)
		}
		if got := r.Header.Values("X-Multi"); !cmp.Equal(got, []string{"a", "b"}) {
			t.Errorf("request %d: X-Multi %q, want [a b]", i+1, got)
		}
		if r.Header.Get("Webhook-Signature") == "" || r.Header.Get("X-Api-Key") != "k" || r.Header.Get("Authorization") != "Bearer t" {
			t.Errorf("request %d: signature or credentials missing: %v", i+1, r.Header)
		}
	}
}

// The names of record headers are cached; a topic whose every record
// carries new names must still render each one, past the cache's bound.
func TestRawRendersRecordHeadersWhateverTheirNumberOfNames(t *testing.T) {
	for i := range 2000 {
		name := "h" + string(rune('a'+i%26)) + "-" + strconv.Itoa(i)
		m := &webhooks.Message{ID: "id", Value: []byte("v"), Headers: []webhooks.Header{{Name: name, Value: []byte("x")}}}
		req, err := webhooks.NewRequest("http://example.com", webhooks.FormatRaw, m, "")
		if err != nil {
			t.Fatal(err)
		}
		if got := req.Header.Get(webhooks.HeaderRecordPrefix + name); got != "x" {
			t.Fatalf("header %d: %s = %q, want x (headers %v)", i, webhooks.HeaderRecordPrefix+name, got, req.Header)
		}
	}
}
