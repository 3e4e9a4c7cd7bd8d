package api

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
)

// flushKeys stores, as the owner of partition p of topic would, its keys
// not flowing.
func flushKeys(t *testing.T, e *env, subID, topic string, p int32, owner string, list tracking.StalledKeys) {
	t.Helper()
	ctx := context.Background()
	pk := tracking.PartitionKey{Subscription: subID, Topic: topic, Partition: p}
	c, err := e.tracker.ClaimRanges(ctx, pk, owner, 1, "", nil)
	if err != nil {
		t.Fatalf("claim %s: %v", pk, err)
	}
	f := tracking.Flush{Epoch: c.Epoch, Watermark: 0, Fetched: 100, Committed: -1, Stalled: &list}
	if err := e.tracker.FlushRanges(ctx, []tracking.PartitionFlush{{Key: pk, Flush: f}})[0].Err; err != nil {
		t.Fatalf("flush %s: %v", pk, err)
	}
}

func TestKeysListsParkedAndRetryingKeysTheOwnersFlushed(t *testing.T) {
	e := newEnv(t)
	sub := e.create(t, `{"name":"n","topics":["orders"],"endpoint":{"url":"https://hooks.example.com/in"}}`)
	since := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	next := since.Add(2 * time.Minute)
	flushKeys(t, e, sub.ID, "orders", 2, "node-b", tracking.StalledKeys{Keys: []tracking.StalledKey{
		{Key: "customer-9", Offset: 70, State: "retrying", Since: since, Dispatched: since, Attempts: 4, LastStatus: 503,
			LastError: "503 Service Unavailable", NextAttempt: next, Behind: 3},
	}, Total: 1})
	flushKeys(t, e, sub.ID, "orders", 0, "node-a", tracking.StalledKeys{Keys: []tracking.StalledKey{
		{KeyBase64: "AAE=", Offset: 12, State: "parked", Since: since, Behind: 40, Parked: 40},
		{Key: "customer-slow", Offset: 5, State: "in_flight", Since: since, Dispatched: since, Behind: 8},
	}, Total: 2})

	list := func(query string) subscription.KeyList {
		t.Helper()
		r := e.send(t, req{method: http.MethodGet, path: "/v1/subscriptions/" + sub.ID + "/keys" + query, token: e.reader})
		if r.status != http.StatusOK {
			t.Fatalf("GET keys%s = %d %s", query, r.status, r.body)
		}
		var l subscription.KeyList
		if err := json.Unmarshal(r.body, &l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	type row struct {
		Partition int32
		Owner     string
		Key, B64  string
		Offset    int64
		State     subscription.KeyState
		Attempts  int
		Status    int
		Next      bool
		Behind    int64
		Parked    int64
	}
	rows := func(l subscription.KeyList) []row {
		out := []row{}
		for _, k := range l.Keys {
			out = append(out, row{k.Partition, k.Owner, k.Key, k.KeyBase64, k.Offset, k.State, k.Attempts, k.LastStatus,
				k.NextAttempt != nil && k.NextAttempt.Equal(next), k.Behind, k.Parked})
		}
		return out
	}
	slow := row{Partition: 0, Owner: "node-a", Key: "customer-slow", Offset: 5, State: subscription.KeyInFlight, Behind: 8}
	parked := row{Partition: 0, Owner: "node-a", B64: "AAE=", Offset: 12, State: subscription.KeyParked, Behind: 40, Parked: 40}
	retrying := row{Partition: 2, Owner: "node-b", Key: "customer-9", Offset: 70, State: subscription.KeyRetrying, Attempts: 4, Status: 503, Next: true, Behind: 3}

	all := list("")
	if diff := cmp.Diff([]row{slow, parked, retrying}, rows(all)); diff != "" || all.Truncated {
		t.Fatalf("every key (-want +got):\n%s\ntruncated %v, want false", diff, all.Truncated)
	}
	if k := all.Keys[0]; k.AgeMS < 60_000 || !k.Since.Equal(since) {
		t.Errorf("since %v, age %d ms; want %v, a minute or more", k.Since, k.AgeMS, since)
	}
	if got := list("?state=parked,retrying"); !cmp.Equal([]row{parked, retrying}, rows(got)) {
		t.Errorf("state=parked,retrying: %+v", rows(got))
	}
	if got := list("?partition=2"); !cmp.Equal([]row{retrying}, rows(got)) {
		t.Errorf("partition=2: %+v", rows(got))
	}
	if got := list("?topic=payments"); len(got.Keys) != 0 {
		t.Errorf("topic=payments, not the subscription's: %+v", rows(got))
	}
	limited := list("?limit=2")
	if diff := cmp.Diff([]row{slow, parked}, rows(limited)); diff != "" || !limited.Truncated {
		t.Fatalf("limit=2 (-want +got):\n%s\ntruncated %v, want true", diff, limited.Truncated)
	}

	// An owner that counted more keys than it stored says so.
	flushKeys(t, e, sub.ID, "orders", 3, "node-a", tracking.StalledKeys{Keys: []tracking.StalledKey{
		{Key: "k", Offset: 1, State: "parked", Since: since, Parked: 1},
	}, Total: 150})
	if got := list("?partition=3"); len(got.Keys) != 1 || !got.Truncated {
		t.Errorf("a partition with 150 keys counted, 1 stored: %d keys, truncated %v; want 1, true", len(got.Keys), got.Truncated)
	}
}

func TestKeysNamesTheBadQueryParameter(t *testing.T) {
	e := newEnv(t)
	sub := e.create(t, `{"name":"n","topics":["orders"],"endpoint":{"url":"https://hooks.example.com/in"}}`)
	for _, tc := range []struct{ query, field string }{
		{"state=stuck", "state"},
		{"state=parked,", "state"},
		{"partition=-1", "partition"},
		{"partition=two", "partition"},
		{"limit=0", "limit"},
		{"limit=1001", "limit"},
		{"topic=", "topic"},
		{"cursor=abc", "cursor"},
	} {
		r := e.do(t, http.MethodGet, "/v1/subscriptions/"+sub.ID+"/keys?"+tc.query, "")
		var p problem
		if err := json.Unmarshal(r.body, &p); err != nil {
			t.Fatalf("%s: %v in %s", tc.query, err, r.body)
		}
		if r.status != http.StatusBadRequest || r.header.Get("Content-Type") != "application/problem+json" ||
			len(p.Errors) != 1 || p.Errors[0].Field != tc.field {
			t.Errorf("?%s = %d %s %s; want 400 problem+json naming %s", tc.query, r.status, r.header.Get("Content-Type"), r.body, tc.field)
		}
	}
	if r := e.do(t, http.MethodGet, "/v1/subscriptions/sub_missing/keys", ""); r.status != http.StatusNotFound {
		t.Errorf("unknown subscription = %d %s, want 404", r.status, r.body)
	}
}
