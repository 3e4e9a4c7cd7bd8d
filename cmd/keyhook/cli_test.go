package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/keyhook/keyhook/api"
	"github.com/keyhook/keyhook/auth"
	"github.com/keyhook/keyhook/deliverylog"
	"github.com/keyhook/keyhook/internal/keyspace"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/nodes"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/webhooks"
)

// cliStatus answers every status request with one busy partition.
type cliStatus struct{}

// Keys answers the listing of keys not flowing with one retrying key.
func (cliStatus) Keys(_ context.Context, s *subscription.Subscription, _ subscription.KeysQuery) (*subscription.KeyList, error) {
	return &subscription.KeyList{SubscriptionID: s.ID, Keys: []subscription.StalledKey{
		{Topic: s.Topics[0], Partition: 0, Owner: "node-a", Key: "order-7", Offset: 41, State: subscription.KeyRetrying,
			AgeMS: 125_000, Attempts: 6, LastStatus: 503, Behind: 10},
	}}, nil
}

func (cliStatus) Status(_ context.Context, s *subscription.Subscription) (*subscription.Status, error) {
	age, parkedAge := int64(1500), int64(95_000)
	next := time.Now().Add(30 * time.Second)
	return &subscription.Status{SubscriptionID: s.ID, Partitions: []subscription.PartitionStatus{
		{Topic: s.Topics[0], Partition: 0, Committed: 40, LogEnd: 52, Lag: 12, Watermark: 41, Pending: 11, InFlight: 3,
			InFlightKeys: 3, AckedRanges: [][2]int64{}, Owner: "node-a", OldestPendingAgeMS: &age,
			Holding: &subscription.HoldingStatus{Offset: 41, Key: "order-7", AgeMS: 125_000, Attempts: 6, LastStatus: 503, NextAttempt: &next, Behind: 10,
				Parked: 7, OldestParkedAgeMS: &parkedAge}},
		{Topic: s.Topics[0], Partition: 1, Committed: -1, Watermark: -1, AckedRanges: [][2]int64{}},
	}}, nil
}

// cliAdmin records seeks and has no dead letters.
type cliAdmin struct {
	mu    sync.Mutex
	seeks []subscription.SeekRequest
}

func (a *cliAdmin) Seek(_ context.Context, sub *subscription.Subscription, req subscription.SeekRequest) (*subscription.SeekResult, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seeks = append(a.seeks, req)
	res := &subscription.SeekResult{SubscriptionID: sub.ID}
	for _, o := range req.Offsets {
		res.Partitions = append(res.Partitions, subscription.SeekedPartition{Topic: o.Topic, Partition: o.Partition, Previous: -1, Offset: o.Offset})
	}
	return res, nil
}

func (a *cliAdmin) ResolveStart(context.Context, *subscription.Subscription) error { return nil }

func (a *cliAdmin) DeadLetters(context.Context, *subscription.Subscription, int, string) (*subscription.DeadLetterPage, error) {
	return &subscription.DeadLetterPage{}, nil
}

func (a *cliAdmin) Redrive(context.Context, *subscription.Subscription, []string) (int, error) {
	return 0, nil
}

// cliEnv is a real API server on a real Redis, and the environment the
// CLI reads.
type cliEnv struct {
	url, token string
	rdb        *redis.Client
	redisURL   string
	brokers    string
	admin      *cliAdmin
}

func newCLIEnv(t *testing.T) *cliEnv {
	t.Helper()
	srv := testutil.StartRedis(t)
	rdb := srv.Client()
	tokens, err := auth.New(rdb, auth.Config{})
	if err != nil {
		t.Fatal(err)
	}
	token, _, err := tokens.Create(context.Background(), "cli", []auth.Scope{auth.ScopeAdmin})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := nodes.New(rdb, nodes.Config{})
	if err != nil {
		t.Fatal(err)
	}
	client, err := webhooks.NewClient(webhooks.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	tester, _ := api.NewWebhookTester(client)
	admin := &cliAdmin{}
	subs, err := subscription.New(rdb, subscription.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.NewRouter(api.Dependencies{
		Store: subs, URLs: webhooks.AddressPolicy{AllowPrivate: true}, Status: cliStatus{},
		Seeker: admin, Starts: admin, DeadLetters: admin, Tester: tester, Nodes: reg, Auth: tokens, Keys: cliStatus{},
		DeliveryLog: deliverylog.NewReader(rdb, keyspace.Keyspace{}),
	}, api.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return &cliEnv{url: hs.URL, token: token, rdb: rdb, redisURL: srv.URL(), admin: admin}
}

func (e *cliEnv) getenv(k string) string {
	switch k {
	case "KEYHOOK_API_URL":
		return e.url
	case "KEYHOOK_TOKEN":
		return e.token
	case "KEYHOOK_REDIS_URL":
		return e.redisURL
	case "KEYHOOK_KAFKA_BROKERS":
		return e.brokers
	}
	return ""
}

// run runs the keyhook command line and returns its output.
func (e *cliEnv) run(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, e.getenv, &out, &errOut)
	return out.String(), errOut.String(), err
}

func (e *cliEnv) mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, err := e.run(t, args...)
	if err != nil {
		t.Fatalf("keyhook %s: %v\nstderr: %s", strings.Join(args, " "), err, errOut)
	}
	return out
}

// columns splits a table line on runs of two or more spaces.
func columns(line string) []string {
	return regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(line), -1)
}

func TestSubscriptionsCLIRoundTrip(t *testing.T) {
	e := newCLIEnv(t)

	out := e.mustRun(t, "subscriptions", "create", "--name", "orders to billing", "--topic", "orders", "--topic", "refunds",
		"--url", "http://127.0.0.1:9/billing", "--ordering", "partition", "--max-in-flight", "16", "--start", "latest")
	id := regexp.MustCompile(`sub_[a-z2-7]{20}`).FindString(out)
	if id == "" || !strings.Contains(out, "shown once") || !regexp.MustCompile(`(?m)^SIGNING SECRET\s+sec_\S+ whsec_`).MatchString(out) {
		t.Fatalf("create output:\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^ORDERING\s+partition$`).MatchString(out) || !regexp.MustCompile(`(?m)^TOPICS\s+orders,refunds$`).MatchString(out) {
		t.Errorf("create table:\n%s", out)
	}

	// A second one from a file, answering JSON.
	file := filepath.Join(t.TempDir(), "sub.json")
	if err := os.WriteFile(file, []byte(`{"name":"audit","topics":["audit"],"endpoint":{"url":"http://127.0.0.1:9/audit"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var second subscription.Subscription
	if err := json.Unmarshal([]byte(e.mustRun(t, "subscriptions", "create", "-f", file, "-o", "json")), &second); err != nil || second.Name != "audit" {
		t.Fatalf("create -f -o json: %+v %v", second, err)
	}

	// list: an aligned table, every column under its header.
	out = e.mustRun(t, "subscriptions", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("list table:\n%s", out)
	}
	header := lines[0]
	wantHeader := []string{"ID", "NAME", "TOPICS", "ORDERING", "MAX IN FLIGHT", "STATE", "ENDPOINT"}
	if diff := cmp.Diff(wantHeader, columns(header)); diff != "" {
		t.Errorf("header (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{id, "orders to billing", "orders,refunds", "partition", "16", "active", "http://127.0.0.1:9/billing"}, columns(lines[1])); diff != "" {
		t.Errorf("first row (-want +got):\n%s", diff)
	}
	for _, l := range lines[1:] {
		if strings.Index(l, "http://") != strings.Index(header, "ENDPOINT") {
			t.Errorf("columns not aligned:\n%s", out)
		}
	}
	var listed []subscription.Subscription
	if err := json.Unmarshal([]byte(e.mustRun(t, "subscriptions", "list", "--topic", "audit", "-o", "json")), &listed); err != nil || len(listed) != 1 || listed[0].ID != second.ID {
		t.Errorf("list --topic audit -o json = %+v, %v", listed, err)
	}
	// Paging is followed to the end.
	if err := json.Unmarshal([]byte(e.mustRun(t, "subscriptions", "list", "--page-size", "1", "-o", "json")), &listed); err != nil || len(listed) != 2 {
		t.Errorf("list over pages of 1 = %d subscriptions, %v", len(listed), err)
	}

	if out := e.mustRun(t, "subscriptions", "pause", id); !regexp.MustCompile(`(?m)^STATE\s+paused$`).MatchString(out) {
		t.Errorf("pause:\n%s", out)
	}
	var got subscription.Subscription
	if err := json.Unmarshal([]byte(e.mustRun(t, "subscriptions", "resume", id, "-o", "json")), &got); err != nil || got.Paused || got.Version != 3 {
		t.Errorf("resume -o json = %+v, %v", got, err)
	}
	if out := e.mustRun(t, "subscriptions", "get", "-o", "table", id); !strings.Contains(out, "VERSION") || strings.Contains(out, "whsec_") && !strings.Contains(out, "…") {
		t.Errorf("get:\n%s", out)
	}

	out = e.mustRun(t, "subscriptions", "seek", id, "--to", "offsets", "--offset", "orders/0=5", "--offset", "refunds/3=0")
	if diff := cmp.Diff([]string{"TOPIC", "PARTITION", "PREVIOUS", "OFFSET"}, columns(strings.Split(out, "\n")[0])); diff != "" {
		t.Errorf("seek header (-want +got):\n%s", diff)
	}
	want := subscription.SeekRequest{To: subscription.SeekOffsets, Offsets: []subscription.SeekOffset{{Topic: "orders", Offset: 5}, {Topic: "refunds", Partition: 3}}}
	if diff := cmp.Diff([]subscription.SeekRequest{want}, e.admin.seeks); diff != "" {
		t.Errorf("seek reached the API as (-want +got):\n%s", diff)
	}

	out = e.mustRun(t, "subscriptions", "status", id)
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if diff := cmp.Diff([]string{"orders", "0", "40", "52", "12", "41", "11", "3", "3", "1.5s", "node-a"}, columns(lines[1])); diff != "" {
		t.Errorf("status row (-want +got):\n%s\n%s", diff, out)
	}
	if diff := cmp.Diff([]string{"orders", "1", "-", "0", "0", "-", "0", "0", "0", "-", "-"}, columns(lines[2])); diff != "" {
		t.Errorf("idle status row (-want +got):\n%s", diff)
	}
	// Why the commit waits: the record holding the watermark, its key,
	// attempts, last answer, next attempt and what is behind it.
	if want := `orders/0: offset 41 (key "order-7"), read 2m5s ago, 6 attempts, last answered 503, next attempt in 30s; 10 records pending behind it (7 parked by offset, the oldest read 1m35s ago)`; !strings.Contains(out, want) {
		t.Errorf("status does not say what holds the watermark; want %q in:\n%s", want, out)
	}
	var st subscription.Status
	if err := json.Unmarshal([]byte(e.mustRun(t, "subscriptions", "status", id, "-o", "json")), &st); err != nil || len(st.Partitions) != 2 {
		t.Errorf("status -o json = %+v, %v", st, err)
	}

	// The keys not flowing, one row each.
	out = e.mustRun(t, "subscriptions", "keys", id, "--state", "retrying")
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if diff := cmp.Diff([]string{"orders", "0", `"order-7"`, "41", "retrying", "2m5s", "6", "503", "10", "0", "node-a"}, columns(lines[1])); diff != "" {
		t.Errorf("keys row (-want +got):\n%s\n%s", diff, out)
	}
	if out := e.mustRun(t, "subscriptions", "delete", id); strings.TrimSpace(out) != "deleted "+id {
		t.Errorf("delete: %q", out)
	}
	_, _, err := e.run(t, "subscriptions", "get", id)
	if err == nil || !strings.Contains(err.Error(), "Not found (404)") {
		t.Errorf("get after delete: %v", err)
	}
}

func TestSubscriptionsCLIPrintsProblems(t *testing.T) {
	e := newCLIEnv(t)
	_, _, err := e.run(t, "subscriptions", "create", "--topic", "a b", "--url", "ftp://x", "--max-in-flight", "0")
	if err == nil {
		t.Fatal("invalid create succeeded")
	}
	for _, want := range []string{"Request body is invalid (400)", "fields are invalid", "\n  name: is required", "\n  topics[0]: may contain only", "\n  endpoint.url: must be an absolute http or https URL"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}

	bad := &cliEnv{url: e.url, token: "kh_wrong"}
	_, _, err = bad.run(t, "subscriptions", "list")
	if err == nil || !strings.Contains(err.Error(), "Authentication required (401)") {
		t.Errorf("wrong token: %v", err)
	}
	for _, args := range [][]string{
		{"subscriptions", "get"},
		{"subscriptions", "list", "extra"},
		{"subscriptions", "list", "-o", "yaml"},
		{"subscriptions", "frobnicate"},
		{"subscriptions", "seek", "sub_x", "--offset", "nope"},
		{"subscriptions", "create", "-f", "x.json", "--name", "n"},
	} {
		if _, _, err := e.run(t, args...); err == nil {
			t.Errorf("keyhook %s succeeded", strings.Join(args, " "))
		}
	}
	if _, _, err := (&cliEnv{url: "ftp://nowhere"}).run(t, "subscriptions", "list"); err == nil || !strings.Contains(err.Error(), "--api-url (KEYHOOK_API_URL)") {
		t.Errorf("bad API URL: %v", err)
	}
}

func TestTokenCLICreatesListsAndRevokes(t *testing.T) {
	e := newCLIEnv(t)
	if _, _, err := e.run(t, "token", "create", "--name", "early", "--scopes", "admin"); err == nil || !strings.Contains(err.Error(), "--kafka-brokers (KEYHOOK_KAFKA_BROKERS) is required") {
		t.Errorf("token create without Kafka: %v", err)
	}
	e.brokers = strings.Join(testutil.Kfake(t, 1), ",")
	out, errOut, err := e.run(t, "token", "create", "--name", "deploy-bot", "--scopes", "subscriptions:read,subscriptions:write")
	if err != nil {
		t.Fatalf("token create: %v %s", err, errOut)
	}
	secret := strings.TrimSpace(out)
	if !regexp.MustCompile(`^kh_[A-Za-z0-9_-]{43}$`).MatchString(secret) || !strings.Contains(errOut, "shown only now") {
		t.Fatalf("token create printed %q, %q", out, errOut)
	}
	// The new token works against the API.
	user := &cliEnv{url: e.url, token: secret}
	if _, _, err := user.run(t, "subscriptions", "list"); err != nil {
		t.Errorf("the new token cannot list: %v", err)
	}

	out = e.mustRun(t, "token", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if diff := cmp.Diff([]string{"NAME", "SCOPES", "CREATED", "LAST USED"}, columns(lines[0])); diff != "" {
		t.Errorf("header (-want +got):\n%s", diff)
	}
	if len(lines) != 3 || !strings.HasPrefix(lines[2], "deploy-bot") || !strings.Contains(lines[2], "subscriptions:read,subscriptions:write") {
		t.Errorf("token list:\n%s", out)
	}
	if strings.Contains(out, secret) || strings.Contains(out, e.token) {
		t.Error("token list shows a token")
	}
	var list []auth.Token
	if err := json.Unmarshal([]byte(e.mustRun(t, "token", "list", "-o", "json")), &list); err != nil || len(list) != 2 || list[1].LastUsed == nil {
		t.Errorf("token list -o json = %+v, %v", list, err)
	}

	if out := e.mustRun(t, "token", "revoke", "deploy-bot"); strings.TrimSpace(out) != "revoked deploy-bot" {
		t.Errorf("revoke: %q", out)
	}
	if _, _, err := user.run(t, "subscriptions", "list"); err == nil {
		t.Error("a revoked token still works")
	}
	for _, args := range [][]string{
		{"token", "create", "--name", "x", "--scopes", "root"},
		{"token", "create", "--name", "deploy bot", "--scopes", "admin"},
		{"token", "revoke", "deploy-bot"},
		{"token", "revoke"},
	} {
		if _, _, err := e.run(t, args...); err == nil {
			t.Errorf("keyhook %s succeeded", strings.Join(args, " "))
		}
	}
	if _, _, err := (&cliEnv{}).run(t, "token", "list"); err == nil || !strings.Contains(err.Error(), "--redis-url (KEYHOOK_REDIS_URL) is required") {
		t.Errorf("token list without Redis: %v", err)
	}
}

func TestPrintBreakersNamesEachNodeAndNothingWhenClosed(t *testing.T) {
	now := time.Date(2026, 12, 4, 10, 0, 30, 0, time.UTC)
	var b strings.Builder
	if err := printBreakers(&b, nil, now); err != nil || b.Len() != 0 {
		t.Fatalf("no breakers printed %q (%v), want nothing", b.String(), err)
	}
	err := printBreakers(&b, []subscription.EndpointBreaker{{Node: "node-a", Origin: "https://h:443", State: "open", Since: now.Add(-30 * time.Second), Waiting: 12}}, now)
	want := "\nThe endpoint's circuit breaker is not closed on:\n  node-a: open for 30s, 12 deliveries waiting (https://h:443)\n"
	if err != nil || b.String() != want {
		t.Errorf("printed %q (%v), want %q", b.String(), err, want)
	}
}
