package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keyhook/keyhook/subscription"
)

func TestConcurrentWritesWithOneETagLetExactlyOneWin(t *testing.T) {
	e := newEnv(t)
	sub := e.create(t, validBody)
	tag := e.do(t, http.MethodGet, "/v1/subscriptions/"+sub.ID, "").header.Get("ETag")

	const writers = 8
	statuses := make([]int, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			body := fmt.Sprintf(`{"name":"writer %d","topics":["orders"],"endpoint":{"url":"https://h.example/"}}`, i)
			method := http.MethodPut
			if i%2 == 1 {
				method, body = http.MethodPatch, fmt.Sprintf(`{"name":"writer %d"}`, i)
			}
			r := e.send(t, req{method: method, path: "/v1/subscriptions/" + sub.ID, token: e.writer,
				header: map[string]string{"Content-Type": "application/json", "If-Match": tag}, body: body})
			statuses[i] = r.status
			if r.status == http.StatusPreconditionFailed {
				wantProblem(t, r, http.StatusPreconditionFailed, slugPreconditionFailed)
			}
		})
	}
	wg.Wait()
	won := 0
	for _, s := range statuses {
		switch s {
		case http.StatusOK:
			won++
		case http.StatusPreconditionFailed:
		default:
			t.Errorf("a writer got %d", s)
		}
	}
	if won != 1 {
		t.Errorf("%d writers won with the same ETag, want exactly 1 (statuses %v)", won, statuses)
	}
	got, err := e.store.Get(context.Background(), sub.ID)
	if err != nil || got.Version != 2 {
		t.Errorf("stored version = %d (%v), want 2: one change", got.Version, err)
	}

	// The winner's ETag works; the old one no longer does, for DELETE too.
	wantProblem(t, e.send(t, req{method: http.MethodDelete, path: "/v1/subscriptions/" + sub.ID, token: e.writer,
		header: map[string]string{"If-Match": tag}}), http.StatusPreconditionFailed, slugPreconditionFailed)
	fresh := e.do(t, http.MethodGet, "/v1/subscriptions/"+sub.ID, "").header.Get("ETag")
	r := e.send(t, req{method: http.MethodDelete, path: "/v1/subscriptions/" + sub.ID, token: e.writer,
		header: map[string]string{"If-Match": `"sub_other.v2", ` + fresh}})
	if r.status != http.StatusNoContent {
		t.Errorf("DELETE with a list holding the current ETag = %d %s", r.status, r.body)
	}
}

func TestIfMatchStarAppliesToAnyVersionOfAnExistingSubscription(t *testing.T) {
	e := newEnv(t)
	sub := e.create(t, validBody)
	r := e.send(t, req{method: http.MethodPatch, path: "/v1/subscriptions/" + sub.ID, token: e.writer,
		header: map[string]string{"If-Match": "*"}, body: `{"max_in_flight":7}`})
	if r.status != http.StatusOK {
		t.Errorf("PATCH If-Match * = %d %s", r.status, r.body)
	}
	wantProblem(t, e.send(t, req{method: http.MethodPatch, path: "/v1/subscriptions/sub_missing", token: e.writer,
		header: map[string]string{"If-Match": "*"}, body: `{}`}), http.StatusNotFound, slugNotFound)
}

func TestIdempotentCreateReplaysTheFirstAnswer(t *testing.T) {
	e := newEnv(t)
	send := func(key, body string) response {
		return e.send(t, req{method: http.MethodPost, path: "/v1/subscriptions", token: e.writer,
			header: map[string]string{"Content-Type": "application/json", "Idempotency-Key": key}, body: body})
	}
	first := send("order-42", validBody)
	if first.status != http.StatusCreated || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first POST = %d replayed %q: %s", first.status, first.header.Get("Idempotent-Replayed"), first.body)
	}
	var sub subscription.Subscription
	if err := json.Unmarshal(first.body, &sub); err != nil {
		t.Fatal(err)
	}
	// Changing the subscription does not change what a replay answers.
	e.do(t, http.MethodPost, "/v1/subscriptions/"+sub.ID+"/pause", "")

	before := e.snapshot(t)
	again := send("order-42", validBody)
	if again.status != http.StatusCreated || again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replayed POST = %d replayed %q", again.status, again.header.Get("Idempotent-Replayed"))
	}
	// The replay is the first answer without the signing secret's value.
	if want := withoutSecrets(t, first.body); withoutSecrets(t, again.body) != want || strings.Contains(string(again.body), `"secret"`) {
		t.Errorf("replayed body differs:\nwant  %s\nagain %s", want, again.body)
	}
	for _, h := range []string{"Location", "ETag"} {
		if again.header.Get(h) != first.header.Get(h) {
			t.Errorf("replayed %s = %q, first %q", h, again.header.Get(h), first.header.Get(h))
		}
	}
	p := wantProblem(t, send("order-42", `{"name":"another","topics":["orders"],"endpoint":{"url":"https://h.example/"}}`),
		http.StatusUnprocessableEntity, slugIdempotencyKeyReused)
	if p.Detail == "" {
		t.Error("422 has no detail")
	}
	e.unchanged(t, before)

	if other := send("order-43", validBody); other.status != http.StatusCreated || other.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("another key = %d replayed %q, want a new subscription", other.status, other.header.Get("Idempotent-Replayed"))
	}
	if n := len(mustList(t, e)); n != 2 {
		t.Errorf("%d subscriptions stored, want 2 (one per key)", n)
	}
	keys, _ := e.rdb.Keys(context.Background(), "{keyhook:subscriptions}:idempotency:*").Result()
	for _, k := range keys {
		ttl, _ := e.rdb.PTTL(context.Background(), k).Result()
		if ttl <= 23*time.Hour || ttl > 24*time.Hour {
			t.Errorf("idempotency record %s expires in %v, want 24h", k, ttl)
		}
	}
	if len(keys) != 2 {
		t.Errorf("%d idempotency records, want 2", len(keys))
	}
}

func TestConcurrentIdempotentCreatesMakeOneSubscription(t *testing.T) {
	e := newEnv(t)
	var wg sync.WaitGroup
	bodies := make([]string, 10)
	for i := range bodies {
		wg.Go(func() {
			r := e.send(t, req{method: http.MethodPost, path: "/v1/subscriptions", token: e.writer,
				header: map[string]string{"Idempotency-Key": "same"}, body: validBody})
			if r.status != http.StatusCreated {
				t.Errorf("POST = %d %s", r.status, r.body)
			}
			bodies[i] = string(r.body)
		})
	}
	wg.Wait()
	// One answer created and shows the secret; the others replay it
	// without.
	shown := 0
	for _, b := range bodies {
		if strings.Contains(b, `"secret"`) {
			shown++
		}
		if withoutSecrets(t, []byte(b)) != withoutSecrets(t, []byte(bodies[0])) {
			t.Errorf("answers differ:\n%s\n%s", bodies[0], b)
		}
	}
	if shown != 1 {
		t.Errorf("%d answers show the signing secret; want 1, the creating one", shown)
	}
	if n := len(mustList(t, e)); n != 1 {
		t.Errorf("%d subscriptions stored, want 1", n)
	}
}

func mustList(t *testing.T, e *env) []*subscription.Subscription {
	t.Helper()
	subs, err := e.store.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return subs
}

func TestPaginationIsStableWhileTheSetChanges(t *testing.T) {
	e := newEnv(t)
	var want []string
	for i := range 25 {
		topic := "orders"
		if i%3 == 0 {
			topic = "refunds"
		}
		e.create(t, fmt.Sprintf(`{"name":"s%d","topics":[%q],"endpoint":{"url":"https://h.example/"}}`, i, topic))
	}
	// The order is creation time, then id: subscriptions created in the
	// same millisecond are ordered by id.
	for _, s := range mustList(t, e) {
		want = append(want, s.ID)
	}
	page := func(q string) listResponse {
		t.Helper()
		r := e.send(t, req{method: http.MethodGet, path: "/v1/subscriptions" + q, token: e.reader})
		var l listResponse
		if r.status != http.StatusOK || json.Unmarshal(r.body, &l) != nil {
			t.Fatalf("GET %s = %d %s", q, r.status, r.body)
		}
		return l
	}

	var seen []string
	cursor := ""
	for pages := 0; ; pages++ {
		q := "?limit=10"
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		l := page(q)
		for _, s := range l.Items {
			seen = append(seen, s.ID)
		}
		if pages == 0 {
			// Between pages: delete an item already seen, add a new one.
			e.do(t, http.MethodDelete, "/v1/subscriptions/"+want[0], "")
			e.create(t, `{"name":"late","topics":["orders"],"endpoint":{"url":"https://h.example/"}}`)
		}
		if l.NextCursor == "" {
			break
		}
		cursor = l.NextCursor
		if pages > 5 {
			t.Fatal("paging does not end")
		}
	}
	// Every subscription there from start to end is seen exactly once, in
	// order; the late one, created after the first page, comes last.
	if diff := cmp.Diff(want, seen[:len(want)]); diff != "" {
		t.Errorf("pages (-want +got):\n%s", diff)
	}
	if len(seen) != len(want)+1 {
		t.Errorf("saw %d subscriptions, want %d and the late one", len(seen), len(want))
	}

	// The topic filter pages over the matching subscriptions only.
	l := page("?topic=refunds&limit=5")
	var refunds []string
	for {
		for _, s := range l.Items {
			if !slices.Contains(s.Topics, "refunds") {
				t.Errorf("%s does not read refunds", s.ID)
			}
			refunds = append(refunds, s.ID)
		}
		if l.NextCursor == "" {
			break
		}
		l = page("?topic=refunds&limit=5&cursor=" + l.NextCursor)
	}
	wantRefunds := 0
	for _, s := range mustList(t, e) {
		if slices.Contains(s.Topics, "refunds") {
			wantRefunds++
		}
	}
	if len(refunds) != wantRefunds || wantRefunds < 8 {
		t.Errorf("topic filter found %d subscriptions, want %d (at least 8)", len(refunds), wantRefunds)
	}
}

// withoutSecrets is a create's answer body as a replay shows it: with the
// signing secrets' values removed.
func withoutSecrets(t *testing.T, body []byte) string {
	t.Helper()
	var sub subscription.Subscription
	if err := json.Unmarshal(body, &sub); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	for i := range sub.Signing.Secrets {
		sub.Signing.Secrets[i].Secret = ""
	}
	data, err := json.Marshal(&sub)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
