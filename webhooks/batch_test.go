package webhooks_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/keyhook/keyhook/webhooks"
)

func batchMessages(ids ...string) []*webhooks.Message {
	ms := make([]*webhooks.Message, len(ids))
	for i, id := range ids {
		ms[i] = &webhooks.Message{
			ID:          id,
			Key:         []byte("k" + id),
			Value:       []byte(`{"n":` + string(rune('0'+i)) + `}`),
			ContentType: "application/json",
			Attributes:  []webhooks.Attr{{Name: "offset", Value: string(rune('0' + i))}},
		}
	}
	return ms
}

func TestEncodeBatchWrapsEnvelopesInDeliveries(t *testing.T) {
	body, h, err := webhooks.EncodeBatch(batchMessages("a", "b"))
	if err != nil {
		t.Fatalf("EncodeBatch: %v", err)
	}

	if ct := h.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var got map[string]any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("body is not JSON: %v", err)
	}
	envelope := func(id string, n float64, offset string) map[string]any {
		return map[string]any{
			"id": id, "key": "k" + id, "content_type": "application/json",
			"value":      map[string]any{"n": n},
			"headers":    map[string]any{},
			"attributes": map[string]any{"offset": offset},
		}
	}
	want := map[string]any{"deliveries": []any{envelope("a", 0, "0"), envelope("b", 1, "1")}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("batch body (-want +got):\n%s", diff)
	}
}

func TestEncodeBatchRefusesBatchesItsResponseCouldNotDescribe(t *testing.T) {
	dup := batchMessages("a", "b")
	dup[1].ID = "a"
	noID := batchMessages("a")
	noID[0].ID = ""
	badAttr := batchMessages("a")
	badAttr[0].Attributes = []webhooks.Attr{{Name: "key", Value: "x"}}
	tests := []struct {
		name string
		ms   []*webhooks.Message
		want string
	}{
		{"empty", nil, "a batch needs at least one message"},
		{"nil message", []*webhooks.Message{nil}, "batch message 0 is nil"},
		{"repeated id", dup, `batch message 1 repeats the id "a"`},
		{"missing id", noID, "envelope id must not be empty"},
		{"bad attribute", badAttr, `attribute name "key" is reserved`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := webhooks.EncodeBatch(tt.ms)
			if !errors.Is(err, webhooks.ErrInvalidMessage) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("EncodeBatch = %v, want ErrInvalidMessage containing %q", err, tt.want)
			}
		})
	}
}

func TestBatchIDIsStableAndDependsOnTheDeliveries(t *testing.T) {
	a := webhooks.BatchID([]string{"x", "y"})
	if a != webhooks.BatchID([]string{"x", "y"}) || !strings.HasPrefix(a, "bat_") || len(a) != 28 {
		t.Errorf("BatchID = %q, want a stable bat_ id of 28 characters", a)
	}
	for _, other := range [][]string{{"y", "x"}, {"x"}, {"xy"}, {"x", "y", ""}} {
		if webhooks.BatchID(other) == a {
			t.Errorf("BatchID(%q) equals BatchID([x y])", other)
		}
	}
}

func TestParseBatchResponseAppliesTheContract(t *testing.T) {
	ids := []string{"a", "b", "c"}
	tests := []struct {
		name string
		a    webhooks.Attempt
		want webhooks.BatchResult
		// wantErr is a substring of Err, "" when Err must be nil.
		wantErr string
	}{
		{
			name: "2xx, empty body",
			a:    webhooks.Attempt{Status: 200},
			want: webhooks.BatchResult{Delivered: ids, Outcome: webhooks.OutcomeSuccess},
		},
		{
			name: "2xx, not JSON",
			a:    webhooks.Attempt{Status: 202, Body: []byte("<html>thanks</html>")},
			want: webhooks.BatchResult{Delivered: ids, Outcome: webhooks.OutcomeSuccess},
		},
		{
			name: "2xx, JSON without failed",
			a:    webhooks.Attempt{Status: 200, Body: []byte(`{"ok":true}`)},
			want: webhooks.BatchResult{Delivered: ids, Outcome: webhooks.OutcomeSuccess},
		},
		{
			name: "2xx, failed empty",
			a:    webhooks.Attempt{Status: 200, Body: []byte(`{"failed":[]}`)},
			want: webhooks.BatchResult{Delivered: ids, Outcome: webhooks.OutcomeSuccess},
		},
		{
			name: "2xx, failed null",
			a:    webhooks.Attempt{Status: 200, Body: []byte(`{"failed":null}`)},
			want: webhooks.BatchResult{Delivered: ids, Outcome: webhooks.OutcomeSuccess},
		},
		{
			name: "2xx, JSON array",
			a:    webhooks.Attempt{Status: 200, Body: []byte(`["a"]`)},
			want: webhooks.BatchResult{Delivered: ids, Outcome: webhooks.OutcomeSuccess},
		},
		{
			name:    "partial failure with retry_after",
			a:       webhooks.Attempt{Status: 200, Body: []byte(`{"failed":["c","a"],"retry_after":1.5}`), RetryAfter: 9 * time.Second},
			want:    webhooks.BatchResult{Delivered: []string{"b"}, Failed: []string{"a", "c"}, Outcome: webhooks.OutcomeRetry, RetryAfter: 1500 * time.Millisecond},
			wantErr: "webhooks: endpoint reported 2 of 3 deliveries failed",
		},
		{
			name:    "partial failure falls back to the Retry-After header",
			a:       webhooks.Attempt{Status: 207, Body: []byte(` {"failed":["b","b","zz"]} `), RetryAfter: 9 * time.Second},
			want:    webhooks.BatchResult{Delivered: []string{"a", "c"}, Failed: []string{"b"}, Outcome: webhooks.OutcomeRetry, RetryAfter: 9 * time.Second},
			wantErr: "1 of 3 deliveries failed",
		},
		{
			name: "partial failure naming only unknown ids",
			a:    webhooks.Attempt{Status: 200, Body: []byte(`{"failed":["zz"]}`)},
			want: webhooks.BatchResult{Delivered: ids, Outcome: webhooks.OutcomeSuccess},
		},
		{
			name:    "negative and silly retry_after are ignored",
			a:       webhooks.Attempt{Status: 200, Body: []byte(`{"failed":["a"],"retry_after":-4}`)},
			want:    webhooks.BatchResult{Delivered: []string{"b", "c"}, Failed: []string{"a"}, Outcome: webhooks.OutcomeRetry},
			wantErr: "1 of 3",
		},
		{
			name:    "failed of the wrong type fails everything",
			a:       webhooks.Attempt{Status: 200, Body: []byte(`{"failed":"a,b"}`), RetryAfter: time.Second},
			want:    webhooks.BatchResult{Failed: ids, Outcome: webhooks.OutcomeRetry, RetryAfter: time.Second},
			wantErr: `"failed" must be an array of delivery ids`,
		},
		{
			name:    "a cut body mentioning failed fails everything",
			a:       webhooks.Attempt{Status: 200, Body: []byte(`{"failed":["a","b",`), BodyTruncated: true},
			want:    webhooks.BatchResult{Failed: ids, Outcome: webhooks.OutcomeRetry},
			wantErr: "the body was cut at 19 bytes",
		},
		{
			name: "a cut body without failed is a success",
			a:    webhooks.Attempt{Status: 200, Body: []byte(`<html>long page`), BodyTruncated: true},
			want: webhooks.BatchResult{Delivered: ids, Outcome: webhooks.OutcomeSuccess},
		},
		{
			name:    "429 retries everything after Retry-After",
			a:       webhooks.Attempt{Status: 429, RetryAfter: 30 * time.Second, Body: []byte(`{"failed":["a"]}`)},
			want:    webhooks.BatchResult{Failed: ids, Outcome: webhooks.OutcomeRetry, RetryAfter: 30 * time.Second},
			wantErr: "429 Too Many Requests",
		},
		{
			name:    "400 fails everything for good",
			a:       webhooks.Attempt{Status: 400},
			want:    webhooks.BatchResult{Failed: ids, Outcome: webhooks.OutcomeFinal},
			wantErr: "endpoint answered 400 Bad Request, which is final",
		},
		{
			name:    "no response retries everything",
			a:       webhooks.Attempt{Err: context.DeadlineExceeded},
			want:    webhooks.BatchResult{Failed: ids, Outcome: webhooks.OutcomeRetry},
			wantErr: "deadline exceeded",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := webhooks.ParseBatchResponse(tt.a, ids)

			gotErr := got.Err
			got.Err = nil
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("ParseBatchResponse (-want +got):\n%s", diff)
			}
			switch {
			case tt.wantErr == "" && gotErr != nil:
				t.Errorf("Err = %v, want nil", gotErr)
			case tt.wantErr != "" && (gotErr == nil || !strings.Contains(gotErr.Error(), tt.wantErr)):
				t.Errorf("Err = %v, want it to contain %q", gotErr, tt.wantErr)
			}
		})
	}
}

func TestBatchPartialFailureAgainstARealEndpoint(t *testing.T) {
	var got webhooks.Batch
	var ep *endpoint
	ep = newEndpoint(t, func(w http.ResponseWriter, _ *http.Request, n int) {
		// The recorder has read the body already.
		if err := json.Unmarshal(ep.requests()[n-1].Body, &got); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(webhooks.BatchResponse{Failed: []string{"dlv_2"}, RetryAfter: 2})
	})
	c := newClient(t, webhooks.ClientConfig{})
	ms := batchMessages("dlv_1", "dlv_2", "dlv_3")
	req, err := webhooks.NewBatchRequest(ep.URL, ms)
	if err != nil {
		t.Fatalf("NewBatchRequest: %v", err)
	}

	a := c.Send(context.Background(), req, 1)
	res := webhooks.ParseBatchResponse(a, []string{"dlv_1", "dlv_2", "dlv_3"})

	type summary struct {
		Delivered, Failed []string
		Outcome           webhooks.Outcome
		RetryAfter        time.Duration
	}
	if diff := cmp.Diff(summary{[]string{"dlv_1", "dlv_3"}, []string{"dlv_2"}, webhooks.OutcomeRetry, 2 * time.Second},
		summary{res.Delivered, res.Failed, res.Outcome, res.RetryAfter}); diff != "" {
		t.Errorf("batch result (-want +got):\n%s", diff)
	}
	var ids []string
	for _, e := range got.Deliveries {
		ids = append(ids, e.ID)
	}
	if diff := cmp.Diff([]string{"dlv_1", "dlv_2", "dlv_3"}, ids); diff != "" {
		t.Errorf("delivery ids the endpoint read (-want +got):\n%s", diff)
	}
	if h := ep.requests()[0].Header.Get("Webhook-Id"); h != webhooks.BatchID(ids) {
		t.Errorf("webhook-id = %q, want the batch id %q", h, webhooks.BatchID(ids))
	}
}

func FuzzParseBatchResponse(f *testing.F) {
	f.Add(200, []byte(`{"failed":["a","c"],"retry_after":3}`), false)
	f.Add(200, []byte(`{"failed":"a"}`), false)
	f.Add(200, []byte(`{"failed":[1,2]}`), false)
	f.Add(200, []byte(`{"failed":["a"],"retry_after":1e308}`), false)
	f.Add(200, []byte(`{"failed":["a",`), true)
	f.Add(503, []byte(`{"failed":["a"]}`), false)
	f.Add(0, []byte(nil), false)
	ids := []string{"a", "b", "c"}
	f.Fuzz(func(t *testing.T, status int, body []byte, truncated bool) {
		a := webhooks.Attempt{Status: status, Body: body, BodyTruncated: truncated}
		if status == 0 {
			a.Err = errors.New("connection refused")
		}
		res := webhooks.ParseBatchResponse(a, ids)

		// Every id ends up exactly once, in batch order.
		all := append(append([]string(nil), res.Delivered...), res.Failed...)
		slices.Sort(all)
		if !slices.Equal(all, ids) {
			t.Fatalf("delivered %v + failed %v is not the batch %v", res.Delivered, res.Failed, ids)
		}
		if !slices.IsSorted(res.Delivered) || !slices.IsSorted(res.Failed) {
			t.Fatalf("delivered %v or failed %v is out of batch order", res.Delivered, res.Failed)
		}
		switch {
		case len(res.Failed) == 0 && (res.Outcome != webhooks.OutcomeSuccess || res.Err != nil):
			t.Fatalf("nothing failed but outcome %s, err %v", res.Outcome, res.Err)
		case len(res.Failed) > 0 && (res.Outcome == webhooks.OutcomeSuccess || res.Err == nil):
			t.Fatalf("%d failed but outcome %s, err %v", len(res.Failed), res.Outcome, res.Err)
		case res.RetryAfter < 0:
			t.Fatalf("negative RetryAfter %s", res.RetryAfter)
		}
		if webhooks.Classify(a) != webhooks.OutcomeSuccess && len(res.Delivered) > 0 {
			t.Fatalf("status %d delivered %v", status, res.Delivered)
		}
		// A well-formed partial failure is always honoured.
		var br webhooks.BatchResponse
		if webhooks.Classify(a) == webhooks.OutcomeSuccess && !truncated && json.Unmarshal(body, &br) == nil {
			for _, id := range br.Failed {
				if slices.Contains(ids, id) && slices.Contains(res.Delivered, id) {
					t.Fatalf("%q was reported failed but counted delivered", id)
				}
			}
		}
	})
}
