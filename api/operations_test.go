package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keyhook/keyhook/nodes"
	"github.com/keyhook/keyhook/subscription"
)

func TestSeekHandsAValidRequestToTheSeeker(t *testing.T) {
	e := newEnv(t)
	sub := e.create(t, `{"name":"n","topics":["orders","refunds"],"endpoint":{"url":"https://h.example/"}}`)
	path := "/v1/subscriptions/" + sub.ID + "/seek"
	ts := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tt := range []struct {
		body string
		want subscription.SeekRequest
	}{
		{`{"to":"earliest"}`, subscription.SeekRequest{To: subscription.SeekEarliest}},
		{`{"to":"latest"}`, subscription.SeekRequest{To: subscription.SeekLatest}},
		{`{"to":"timestamp","timestamp":"2030-01-02T04:04:05+01:00"}`, subscription.SeekRequest{To: subscription.SeekTimestamp, Timestamp: ts}},
		{`{"to":"offsets","offsets":[{"topic":"refunds","partition":2,"offset":40},{"topic":"orders","partition":2,"offset":0}]}`,
			subscription.SeekRequest{To: subscription.SeekOffsets, Offsets: []subscription.SeekOffset{{Topic: "refunds", Partition: 2, Offset: 40}, {Topic: "orders", Partition: 2}}}},
	} {
		before := len(e.seeker.requests())
		r := e.send(t, req{method: http.MethodPost, path: path, token: e.writer, body: tt.body})
		var res subscription.SeekResult
		if r.status != http.StatusOK || json.Unmarshal(r.body, &res) != nil || res.SubscriptionID != sub.ID {
			t.Fatalf("seek %s = %d %s", tt.body, r.status, r.body)
		}
		got := e.seeker.requests()[before]
		if !got.Timestamp.IsZero() {
			got.Timestamp = got.Timestamp.UTC()
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("seek %s reached the seeker as (-want +got):\n%s", tt.body, diff)
		}
	}

	e.seeker.err = &subscription.ValidationError{Errors: []subscription.FieldError{{Field: "offsets[0].partition", Message: "topic orders has 4 partitions"}}}
	p := wantProblem(t, e.send(t, req{method: http.MethodPost, path: path, token: e.writer, body: `{"to":"offsets","offsets":[{"topic":"orders","partition":9,"offset":0}]}`}),
		http.StatusBadRequest, slugValidation)
	if diff := cmp.Diff([]string{"offsets[0].partition"}, fields(p)); diff != "" {
		t.Errorf("fields (-want +got):\n%s", diff)
	}
	e.seeker.err = errors.New("kadm: broker gone")
	wantProblem(t, e.send(t, req{method: http.MethodPost, path: path, token: e.writer, body: `{"to":"earliest"}`}), http.StatusInternalServerError, slugInternal)
	wantProblem(t, e.send(t, req{method: http.MethodPost, path: "/v1/subscriptions/sub_none/seek", token: e.writer, body: `{"to":"earliest"}`}), http.StatusNotFound, slugNotFound)
}

// recordingEndpoint is a real HTTP endpoint that keeps what it received
// and answers with status and body.
type recordingEndpoint struct {
	mu      sync.Mutex
	status  int
	body    string
	got     []*http.Request
	payload []string
}

func (re *recordingEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	re.mu.Lock()
	re.got = append(re.got, r)
	re.payload = append(re.payload, string(b))
	status, body := re.status, re.body
	re.mu.Unlock()
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

func TestTestDeliveryReachesTheEndpointAndReportsItsAnswer(t *testing.T) {
	e := newEnv(t)
	ep := &recordingEndpoint{status: 200, body: "thanks"}
	srv := httptest.NewServer(ep)
	t.Cleanup(srv.Close)
	sub := e.create(t, `{"name":"n","topics":["orders"],"endpoint":{"url":"`+srv.URL+`/hook"}}`)
	path := "/v1/subscriptions/" + sub.ID + "/test"
	test := func(body string) TestResult {
		t.Helper()
		r := e.send(t, req{method: http.MethodPost, path: path, token: e.writer, body: body})
		var res TestResult
		if r.status != http.StatusOK || json.Unmarshal(r.body, &res) != nil {
			t.Fatalf("test %s = %d %s", body, r.status, r.body)
		}
		return res
	}

	res := test("")
	if !strings.HasPrefix(res.DeliveryID, "test_") || len(res.DeliveryID) != len("test_")+24 {
		t.Errorf("delivery id %q, want test_ and 24 hex digits", res.DeliveryID)
	}
	want := TestResult{DeliveryID: res.DeliveryID, Success: true, Status: 200, DurationMS: res.DurationMS, ResponseBody: "thanks",
		Body: `{"keyhook":"test","subscription":"` + sub.ID + `"}`}
	if diff := cmp.Diff(want, res); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
	got := ep.got[0]
	if got.Header.Get("webhook-id") != res.DeliveryID || got.Header.Get("Keyhook-Test") != "true" ||
		got.Header.Get("Keyhook-Subscription") != sub.ID || got.Header.Get("Content-Type") != "application/json" || got.URL.Path != "/hook" {
		t.Errorf("endpoint got headers %v path %s", got.Header, got.URL.Path)
	}
	if ep.payload[0] != `{"keyhook":"test","subscription":"`+sub.ID+`"}` {
		t.Errorf("default payload = %s", ep.payload[0])
	}

	ep.status, ep.body = 503, strings.Repeat("x", TestResponseBodyLimit+10)
	res = test(`{"value":{"order":42},"key":"customer-7"}`)
	if res.Success || res.Status != 503 || !res.ResponseBodyTruncated || len(res.ResponseBody) != TestResponseBodyLimit {
		t.Errorf("failing endpoint: success %v status %d truncated %v body %d bytes", res.Success, res.Status, res.ResponseBodyTruncated, len(res.ResponseBody))
	}
	if ep.payload[1] != `{"order":42}` || ep.got[1].Header.Get("Keyhook-Key") != "customer-7" {
		t.Errorf("endpoint got %s with key %q", ep.payload[1], ep.got[1].Header.Get("Keyhook-Key"))
	}

	srv.Close()
	res = test(`{"key":"bin\u0001ary"}`)
	if res.Success || res.Status != 0 || res.Error == "" {
		t.Errorf("unreachable endpoint: %+v, want no status and an error", res)
	}
}

func TestDeadLettersArePagedAndRedriven(t *testing.T) {
	e := newEnv(t)
	sub := e.create(t, validBody)
	first := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, id := range []string{"dlv_a", "dlv_b", "dlv_c"} {
		e.dead.items = append(e.dead.items, subscription.DeadLetter{
			ID: id, Topic: "orders", Partition: 1, Offset: int64(10 + i),
			DeadLetterTopic: "orders.keyhook.dlq", DeadLetterOffset: int64(i), Key: "k", Status: 410,
			Attempts: 1, FirstAttempt: first, LastAttempt: first, Headers: map[string]string{"trace": "t"},
		})
	}
	path := "/v1/subscriptions/" + sub.ID + "/dead-letters"
	r := e.send(t, req{method: http.MethodGet, path: path + "?limit=2", token: e.reader})
	var page subscription.DeadLetterPage
	if r.status != http.StatusOK || json.Unmarshal(r.body, &page) != nil {
		t.Fatalf("GET dead letters = %d %s", r.status, r.body)
	}
	if diff := cmp.Diff(e.dead.items[:2], page.Items); diff != "" || page.NextCursor != "after-dlv_b" {
		t.Errorf("first page (-want +got):\n%s\ncursor %q", diff, page.NextCursor)
	}
	r = e.send(t, req{method: http.MethodGet, path: path + "?limit=2&cursor=" + page.NextCursor, token: e.reader})
	page = subscription.DeadLetterPage{}
	if r.status != http.StatusOK || json.Unmarshal(r.body, &page) != nil || len(page.Items) != 1 || page.NextCursor != "" {
		t.Errorf("second page = %d %s", r.status, r.body)
	}

	for _, tt := range []struct {
		body string
		ids  []string
		n    int
	}{
		{`{"ids":["dlv_a","dlv_x"]}`, []string{"dlv_a", "dlv_x"}, 1},
		{`{"all":true}`, nil, 3},
	} {
		r := e.send(t, req{method: http.MethodPost, path: path + "/redrive", token: e.writer, body: tt.body})
		if r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != `{"redriven":`+string(rune('0'+tt.n))+`}` {
			t.Errorf("redrive %s = %d %s", tt.body, r.status, r.body)
		}
		if diff := cmp.Diff(tt.ids, e.dead.redriven[len(e.dead.redriven)-1]); diff != "" {
			t.Errorf("redrive %s asked for (-want +got):\n%s", tt.body, diff)
		}
	}
}

func TestNodesListsTheLiveRegistry(t *testing.T) {
	e := newEnv(t)
	wantProblemOrEmpty := e.send(t, req{method: http.MethodGet, path: "/v1/nodes", token: e.reader})
	if wantProblemOrEmpty.status != http.StatusOK || strings.TrimSpace(string(wantProblemOrEmpty.body)) != `{"items":[]}` {
		t.Errorf("GET /v1/nodes with none = %d %s", wantProblemOrEmpty.status, wantProblemOrEmpty.body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- e.nodes.Run(ctx, nodes.Info{ID: "node-a", Version: "v1", Roles: []string{"api", "dispatcher"}},
			func() []nodes.Ownership {
				return []nodes.Ownership{{Subscription: "sub_x", Topic: "orders", Partition: 2}}
			})
	}()
	defer func() {
		cancel()
		<-done
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := e.send(t, req{method: http.MethodGet, path: "/v1/nodes", token: e.reader})
		var l nodesResponse
		if r.status != http.StatusOK || json.Unmarshal(r.body, &l) != nil {
			t.Fatalf("GET /v1/nodes = %d %s", r.status, r.body)
		}
		if len(l.Items) == 1 {
			n := l.Items[0]
			if n.ID != "node-a" || n.Version != "v1" || len(n.Owned) != 1 || n.Owned[0].Partition != 2 || n.StartedAt.IsZero() {
				t.Errorf("node = %+v", n)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node never listed: %s", r.body)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
