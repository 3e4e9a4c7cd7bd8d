package api

import (
	"errors"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A DELETE that removed the subscription schedules the cleanup of its
// state; one refused (stale ETag, unknown id) schedules nothing; one whose
// cleanup cannot be scheduled still answers 204, the subscription gone.
func TestDeleteSchedulesTheCleanupOfWhatItRemoved(t *testing.T) {
	e := newEnv(t)
	sub := e.create(t, validBody)
	if r := e.send(t, req{method: http.MethodDelete, path: "/v1/subscriptions/" + sub.ID, token: e.writer,
		header: map[string]string{"If-Match": `"` + sub.ID + `.v99"`}}); r.status != http.StatusPreconditionFailed {
		t.Fatalf("DELETE with a stale ETag = %d", r.status)
	}
	if r := e.do(t, http.MethodDelete, "/v1/subscriptions/sub_unknown", ""); r.status != http.StatusNotFound {
		t.Fatalf("DELETE of an unknown id = %d", r.status)
	}
	if got := e.clean.ids(); len(got) != 0 {
		t.Fatalf("refused DELETEs scheduled cleanups of %v, want none", got)
	}
	if r := e.do(t, http.MethodDelete, "/v1/subscriptions/"+sub.ID, ""); r.status != http.StatusNoContent {
		t.Fatalf("DELETE = %d %s", r.status, r.body)
	}
	if diff := cmp.Diff([]string{sub.ID}, e.clean.ids()); diff != "" {
		t.Errorf("cleanups scheduled (-want +got):\n%s", diff)
	}

	other := e.create(t, validBody)
	e.clean.mu.Lock()
	e.clean.err = errors.New("redis down")
	e.clean.mu.Unlock()
	if r := e.do(t, http.MethodDelete, "/v1/subscriptions/"+other.ID, ""); r.status != http.StatusNoContent {
		t.Fatalf("DELETE whose cleanup cannot be scheduled = %d %s, want 204", r.status, r.body)
	}
	if r := e.do(t, http.MethodGet, "/v1/subscriptions/"+other.ID, ""); r.status != http.StatusNotFound {
		t.Errorf("GET after that DELETE = %d, want 404", r.status)
	}
}
