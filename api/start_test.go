package api

import (
	"errors"
	"net/http"
	"testing"

	"github.com/keyhook/keyhook/subscription"
)

// The start position is fixed for the subscription's group before the
// subscription is stored, under the id it is then stored with: no node
// can see the subscription before its group's commits exist.
func TestCreateFixesTheStartUnderTheStoredIDBeforeStoring(t *testing.T) {
	e := newEnv(t)
	for _, idempotent := range []bool{false, true} {
		r := req{method: http.MethodPost, path: "/v1/subscriptions", token: e.writer,
			header: map[string]string{"Content-Type": "application/json"}, body: validBody}
		if idempotent {
			r.header["Idempotency-Key"] = "start-1"
		}
		resp := e.send(t, r)
		if resp.status != http.StatusCreated {
			t.Fatalf("POST = %d %s", resp.status, resp.body)
		}
		id := resp.header.Get("Location")[len("/v1/subscriptions/"):]
		asked := e.starts.calls()
		last := asked[len(asked)-1]
		if last.ID != id || last.Start != subscription.StartLatest || len(last.Topics) != 1 || last.Topics[0] != "orders" {
			t.Errorf("idempotent %v: start resolved for %q start %q topics %v; want %q, latest, [orders]",
				idempotent, last.ID, last.Start, last.Topics, id)
		}
		if _, err := e.store.Get(t.Context(), id); err != nil {
			t.Errorf("idempotent %v: stored subscription: %v", idempotent, err)
		}
		// The next create names other topics: topics are one subscription's.
		e.do(t, http.MethodDelete, "/v1/subscriptions/"+id, "")
	}
}

// When Kafka cannot answer, a create is refused with 503 problem+json
// (a retry may succeed; nothing is wrong with the request) and nothing is
// stored.
func TestCreateAnswers503AndStoresNothingWhenTheStartCannotBeFixed(t *testing.T) {
	e := newEnv(t)
	e.starts.fail(errors.New("kafka: dial tcp 127.0.0.1:9092: connection refused"))
	before := e.snapshot(t)
	r := e.do(t, http.MethodPost, "/v1/subscriptions", validBody)
	wantProblem(t, r, http.StatusServiceUnavailable, slugKafkaUnavailable)
	e.unchanged(t, before)
}
