package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"sync"
	"testing"
	"time"
)

// syncBuffer is written by dev's goroutines and read by the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestDevPrintsAWorkingToken runs keyhook dev and uses the token and curl
// line it prints: the wiring of authentication, the node registry and
// readiness into a running node, and of the embedded Schema Registry into
// the Avro demo subscription.
func TestDevPrintsAWorkingToken(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"dev", "--http-addr", "127.0.0.1:0", "--log-level", "error"}, noEnv, out, io.Discard)
	}()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("dev: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("dev did not stop")
		}
	}()

	curl := regexp.MustCompile(`curl -s -H 'Authorization: Bearer (kh_[A-Za-z0-9_-]{43})' (http://127\.0\.0\.1:\d+)/v1/subscriptions`)
	var m []string
	deadline := time.Now().Add(15 * time.Second)
	for m = curl.FindStringSubmatch(out.String()); m == nil; m = curl.FindStringSubmatch(out.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("no curl line with a token in:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	token, base := m[1], m[2]
	get := func(path, tok string) (int, []byte) {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if code, _ := get("/v1/subscriptions", ""); code != http.StatusUnauthorized {
		t.Errorf("GET without the token = %d, want 401", code)
	}
	for {
		code, body := get("/v1/subscriptions", token)
		var list struct {
			Items []struct{ Name string } `json:"items"`
		}
		if code != http.StatusOK || json.Unmarshal(body, &list) != nil {
			t.Fatalf("GET with the printed token = %d %s", code, body)
		}
		if len(list.Items) == 2 && list.Items[0].Name+","+list.Items[1].Name == "demo,demo-avro" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo subscription never showed: %s", body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, body := get("/readyz", ""); code != http.StatusOK {
		t.Errorf("GET /readyz = %d %s", code, body)
	}
	for {
		code, body := get("/v1/nodes", token)
		var list struct {
			Items []struct {
				Roles []string `json:"roles"`
			} `json:"items"`
		}
		if code != http.StatusOK || json.Unmarshal(body, &list) != nil {
			t.Fatalf("GET /v1/nodes = %d %s", code, body)
		}
		if len(list.Items) == 1 && len(list.Items[0].Roles) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node never listed itself: %s", body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The Avro subscription decodes its records with the embedded
	// registry's schema and filters them: only it has a filter.
	filtered := regexp.MustCompile(`filtered [1-9]\d* .*orders-avro`)
	for !filtered.MatchString(out.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("no summary line with filtered Avro records in:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
