package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/keyhook/keyhook/internal/keyspace"
	"github.com/keyhook/keyhook/monitor"
	"github.com/keyhook/keyhook/subscription"
)

func TestDisableAfterIsValidatedNamingTheField(t *testing.T) {
	e := newEnv(t)
	for _, v := range []string{`"10s"`, `"soon"`, `"-1h"`, `24`} {
		body := strings.Replace(validBody, `"name"`, `"disable_after":`+v+`,"name"`, 1)
		before := e.snapshot(t)
		r := e.do(t, http.MethodPost, "/v1/subscriptions", body)
		if r.status != http.StatusBadRequest || r.header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(r.body), `"field":"disable_after"`) {
			t.Errorf("disable_after %s: %d %s, want a 400 problem naming disable_after", v, r.status, r.body)
		}
		e.unchanged(t, before)
	}
	sub := e.create(t, strings.Replace(validBody, `"name"`, `"disable_after":"24h","name"`, 1))
	if sub.DisableAfter != "24h" {
		t.Fatalf("disable_after stored as %q, want 24h", sub.DisableAfter)
	}
	if r := e.do(t, http.MethodPatch, "/v1/subscriptions/"+sub.ID, `{"disable_after":null}`); r.status != http.StatusOK || strings.Contains(string(r.body), "disable_after") {
		t.Fatalf("PATCH disable_after null = %d %s, want it off", r.status, r.body)
	}
}

func TestAnAutomaticPauseKeepsItsReasonUntilAResumeClearsItAndTheStreak(t *testing.T) {
	e := newEnv(t)
	sub := e.create(t, strings.Replace(validBody, `"name"`, `"disable_after":"1h","name"`, 1))
	ctx := context.Background()
	// A node's pause, as monitor.Monitor makes it.
	if _, err := e.store.Update(ctx, sub.ID, subscription.AnyVersion, func(s *subscription.Subscription) error {
		s.Paused, s.PausedBy, s.PausedReason = true, subscription.PausedByAuto, "endpoint failing since 2026-12-04T10:00:00Z (disable_after 1h)"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.HSet(ctx, keyspace.Keyspace{}.FailingStreak(sub.ID), "since", "1764842400000").Err(); err != nil {
		t.Fatal(err)
	}
	var got subscription.Subscription
	path := "/v1/subscriptions/" + sub.ID
	// A change of another field keeps who paused it and why.
	r := e.do(t, http.MethodPatch, path, `{"max_in_flight":7}`)
	if err := json.Unmarshal(r.body, &got); err != nil || r.status != http.StatusOK || !got.Paused || got.PausedBy != "auto" || !strings.HasSuffix(got.PausedReason, "(disable_after 1h)") {
		t.Fatalf("PATCH of a paused subscription = %d %s, want it still paused by auto with its reason", r.status, r.body)
	}
	// Clients cannot write them.
	r = e.do(t, http.MethodPatch, path, `{"paused_reason":"mine"}`)
	if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), `"field":"paused_reason"`) {
		t.Fatalf("PATCH paused_reason = %d %s, want a 400 naming it read-only", r.status, r.body)
	}
	r = e.do(t, http.MethodPost, path+"/resume", "")
	got = subscription.Subscription{}
	if err := json.Unmarshal(r.body, &got); err != nil || r.status != http.StatusOK || got.Paused || got.PausedBy != "" || got.PausedReason != "" {
		t.Fatalf("resume = %d %s, want active without paused_by or paused_reason", r.status, r.body)
	}
	if since, err := monitor.Since(ctx, e.rdb, keyspace.Keyspace{}, sub.ID); err != nil || !since.IsZero() {
		t.Fatalf("streak after the resume = %v, %v; want none", since, err)
	}
}
