package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/keyhook/keyhook/auth"
	"github.com/keyhook/keyhook/control"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/nodes"
	"github.com/keyhook/keyhook/recordexpr"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/tracking"
	"github.com/keyhook/keyhook/webhooks"
)

// refusingChecker refuses every URL whose host ends in ".blocked.test",
// the way an address policy refuses a private address.
type refusingChecker struct{}

func (refusingChecker) CheckURL(_ context.Context, raw string) error {
	if strings.Contains(raw, ".blocked.test") {
		return errors.New("host resolves to a private address")
	}
	return nil
}

// fakeStatus answers Status with a fixed result and remembers what it was
// asked about.
type fakeStatus struct {
	mu     sync.Mutex
	status *subscription.Status
	err    error
	asked  []string
}

func (f *fakeStatus) Status(_ context.Context, s *subscription.Subscription) (*subscription.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, s.ID)
	if f.status == nil {
		return &subscription.Status{SubscriptionID: s.ID, Partitions: []subscription.PartitionStatus{}}, f.err
	}
	st := *f.status
	st.Partitions = append([]subscription.PartitionStatus(nil), f.status.Partitions...)
	return &st, f.err
}

func (f *fakeStatus) set(st *subscription.Status, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status, f.err = st, err
}

func (f *fakeStatus) askedIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.asked...)
}

// fourPartitions says every topic has partitions 0 to 3, or fails with
// err.
type fourPartitions struct {
	mu  sync.Mutex
	err error
}

func (f *fourPartitions) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *fourPartitions) Partitions(_ context.Context, topics []string) ([]tracking.PartitionKey, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	var out []tracking.PartitionKey
	for _, topic := range topics {
		for p := range int32(4) {
			out = append(out, tracking.PartitionKey{Topic: topic, Partition: p})
		}
	}
	return out, nil
}

// fakeStarts stands in for control.StartResolver: it records the
// subscriptions it was asked about, as they were then, or fails with err.
type fakeStarts struct {
	mu    sync.Mutex
	asked []subscription.Subscription
	err   error
}

func (f *fakeStarts) ResolveStart(_ context.Context, sub *subscription.Subscription) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, *sub)
	return f.err
}

func (f *fakeStarts) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *fakeStarts) calls() []subscription.Subscription {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]subscription.Subscription(nil), f.asked...)
}

// fakeSeeker stands in for the dispatcher's admin: it records each seek
// and answers with a result built from it, or with err.
type fakeSeeker struct {
	mu   sync.Mutex
	got  []subscription.SeekRequest
	err  error
	subs []string
}

func (f *fakeSeeker) Seek(_ context.Context, sub *subscription.Subscription, req subscription.SeekRequest) (*subscription.SeekResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, req)
	f.subs = append(f.subs, sub.ID)
	if f.err != nil {
		return nil, f.err
	}
	res := &subscription.SeekResult{SubscriptionID: sub.ID, Partitions: []subscription.SeekedPartition{}}
	for _, o := range req.Offsets {
		res.Partitions = append(res.Partitions, subscription.SeekedPartition{Topic: o.Topic, Partition: o.Partition, Previous: -1, Offset: o.Offset})
	}
	if req.To != subscription.SeekOffsets {
		res.Partitions = append(res.Partitions, subscription.SeekedPartition{Topic: sub.Topics[0], Partition: 0, Previous: 5, Offset: 0})
	}
	return res, nil
}

func (f *fakeSeeker) requests() []subscription.SeekRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]subscription.SeekRequest(nil), f.got...)
}

// fakeDeadLetters stands in for the dispatcher's admin: a fixed list of
// dead letters paged by index, and a record of redrives.
type fakeDeadLetters struct {
	mu       sync.Mutex
	items    []subscription.DeadLetter
	redriven [][]string
}

func (f *fakeDeadLetters) DeadLetters(_ context.Context, _ *subscription.Subscription, limit int, cursor string) (*subscription.DeadLetterPage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	start := 0
	if cursor != "" {
		i := -1
		for j, d := range f.items {
			if "after-"+d.ID == cursor {
				i = j
			}
		}
		if i < 0 {
			return nil, subscription.ErrInvalidCursor
		}
		start = i + 1
	}
	page := &subscription.DeadLetterPage{Items: []subscription.DeadLetter{}}
	for _, d := range f.items[start:] {
		if len(page.Items) == limit {
			page.NextCursor = "after-" + page.Items[limit-1].ID
			break
		}
		page.Items = append(page.Items, d)
	}
	return page, nil
}

func (f *fakeDeadLetters) Redrive(_ context.Context, _ *subscription.Subscription, ids []string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.redriven = append(f.redriven, ids)
	if ids == nil {
		return len(f.items), nil
	}
	n := 0
	for _, id := range ids {
		for _, d := range f.items {
			if d.ID == id {
				n++
			}
		}
	}
	return n, nil
}

// lockedBuffer collects log output written from server goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// env is one API server on a real Redis, with a token of each kind.
type env struct {
	url    string
	server *testutil.Redis
	rdb    *redis.Client
	store  *subscription.Store
	tokens *auth.Store
	nodes  *nodes.Registry
	status *fakeStatus
	seeker *fakeSeeker
	starts *fakeStarts
	dead   *fakeDeadLetters
	clean  *fakeCleanup
	// tracker is the real tracking store the keys are read from, over
	// four partitions of every topic.
	tracker *tracking.Store
	keys    *control.KeyReader
	parts   *fourPartitions
	log     *lockedBuffer
	// ready holds the error each fake readiness check returns.
	readyMu sync.Mutex
	ready   map[string]error
	// admin, reader and writer are tokens with the scopes their names say.
	admin, reader, writer string
}

// envOptions change what newEnv builds.
type envOptions struct {
	config func(*Config)
	// brokenStore builds the store and node registry on a Redis that does
	// not answer, while tokens still work: every route then fails inside.
	brokenStore bool
	// configLog, when set, is the store's config log.
	configLog subscription.ConfigLog
	// tester are the test deliveries' decoding options (a registry).
	tester []recordexpr.Option
}

func newEnv(t testing.TB) *env { return newEnvWith(t, envOptions{}) }

func newEnvWith(t testing.TB, o envOptions) *env {
	t.Helper()
	server := testutil.StartRedis(t)
	rdb := server.Client()
	subs, err := subscription.New(rdb, subscription.Config{Log: o.configLog})
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.New(rdb, auth.Config{})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{
		server: server, rdb: rdb,
		store:  subs,
		tokens: tokens,
		status: &fakeStatus{}, seeker: &fakeSeeker{}, starts: &fakeStarts{}, dead: &fakeDeadLetters{}, clean: &fakeCleanup{},
		log:   &lockedBuffer{},
		ready: map[string]error{},
	}
	reg, err := nodes.New(rdb, nodes.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	e.nodes = reg
	if e.tracker, err = tracking.New(rdb, tracking.Config{}); err != nil {
		t.Fatal(err)
	}
	e.parts = &fourPartitions{}
	e.keys = control.NewKeyReaderOver(e.parts, e.tracker)
	store := e.store
	if o.brokenStore {
		dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond, DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
		t.Cleanup(func() { _ = dead.Close() })
		if store, err = subscription.New(dead, subscription.Config{}); err != nil {
			t.Fatal(err)
		}
		reg, err = nodes.New(dead, nodes.Config{})
		if err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	for _, tk := range []struct {
		dst    *string
		name   string
		scopes []auth.Scope
	}{
		{&e.admin, "admin", []auth.Scope{auth.ScopeAdmin}},
		{&e.reader, "reader", []auth.Scope{auth.ScopeRead}},
		{&e.writer, "writer", []auth.Scope{auth.ScopeWrite}},
	} {
		secret, _, err := e.tokens.Create(ctx, tk.name, tk.scopes)
		if err != nil {
			t.Fatal(err)
		}
		*tk.dst = secret
		// A token's first use records its last-used time; make it now,
		// so that snapshots taken by tests already hold it.
		if _, err := e.tokens.Authenticate(ctx, secret); err != nil {
			t.Fatal(err)
		}
	}
	client, err := webhooks.NewClient(webhooks.ClientConfig{Policy: webhooks.AddressPolicy{AllowPrivate: true}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.CloseIdleConnections)
	tester, err := NewWebhookTester(client, o.tester...)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Logger: slog.New(slog.NewTextHandler(e.log, nil)),
		ReadinessChecks: map[string]ReadinessCheck{
			"redis": func(ctx context.Context) error { return rdb.Ping(ctx).Err() },
			"kafka": func(context.Context) error { return e.readyErr("kafka") },
		},
	}
	if o.config != nil {
		o.config(&cfg)
	}
	h, err := NewRouter(Dependencies{
		Store: store, URLs: refusingChecker{}, Status: e.status, Seeker: e.seeker, Starts: e.starts,
		DeadLetters: e.dead, Tester: tester, Nodes: reg, Auth: e.tokens, Cleanup: e.clean, Keys: e.keys,
	}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	e.url = srv.URL
	return e
}

func (e *env) readyErr(name string) error {
	e.readyMu.Lock()
	defer e.readyMu.Unlock()
	return e.ready[name]
}

func (e *env) setReady(name string, err error) {
	e.readyMu.Lock()
	defer e.readyMu.Unlock()
	e.ready[name] = err
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// req describes one request; token "" sends no Authorization header.
type req struct {
	method, path string
	token        string
	header       map[string]string
	body         string
}

func (e *env) send(t testing.TB, r req) response {
	t.Helper()
	hr, err := http.NewRequest(r.method, e.url+r.path, strings.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	if r.token != "" {
		hr.Header.Set("Authorization", "Bearer "+r.token)
	}
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", r.method, r.path, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// do sends an admin request with a JSON body (none when body is "").
func (e *env) do(t testing.TB, method, path, body string) response {
	t.Helper()
	r := req{method: method, path: path, token: e.admin, body: body}
	if body != "" {
		r.header = map[string]string{"Content-Type": "application/json"}
	}
	return e.send(t, r)
}

// create registers body and returns the stored subscription.
func (e *env) create(t testing.TB, body string) *subscription.Subscription {
	t.Helper()
	r := e.do(t, http.MethodPost, "/v1/subscriptions", body)
	if r.status != http.StatusCreated {
		t.Fatalf("POST = %d %s", r.status, r.body)
	}
	var sub subscription.Subscription
	if err := json.Unmarshal(r.body, &sub); err != nil {
		t.Fatal(err)
	}
	return &sub
}

// snapshot returns every key of the Redis database with its DUMP, the
// whole state the API could have changed.
func (e *env) snapshot(t testing.TB) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := e.rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		d, err := e.rdb.Dump(ctx, k).Result()
		if err != nil {
			t.Fatalf("DUMP %s: %v", k, err)
		}
		out[k] = d
	}
	return out
}

func (e *env) unchanged(t testing.TB, before map[string]string) {
	t.Helper()
	if diff := cmp.Diff(before, e.snapshot(t)); diff != "" {
		t.Errorf("Redis changed (-before +after):\n%s", diff)
	}
}

// wantProblem checks that r is a problem+json of the given status and slug
// and returns it.
func wantProblem(t testing.TB, r response, status int, slug string) problem {
	t.Helper()
	if r.status != status {
		t.Errorf("status = %d, want %d; body %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type = %q, want application/problem+json", ct)
	}
	var p problem
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem body %s: %v", r.body, err)
	}
	if p.Type != problemTypeBase+slug || p.Status != status || p.Title == "" {
		t.Errorf("problem = %+v, want type %s, status %d and a title", p, problemTypeBase+slug, status)
	}
	return p
}

func fields(p problem) []string {
	var fs []string
	for _, fe := range p.Errors {
		fs = append(fs, fe.Field)
	}
	return fs
}

const validBody = `{"name":"orders to billing","topics":["orders"],"endpoint":{"url":"https://billing.example.com/hook","timeout_ms":5000},"ordering":"partition","max_in_flight":10,"start":"latest","dead_letter_topic":"none"}`

// fakeCleanup records the cleanups scheduled.
type fakeCleanup struct {
	mu        sync.Mutex
	scheduled []string
	err       error
}

func (f *fakeCleanup) Schedule(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	f.scheduled = append(f.scheduled, id)
	return nil
}

func (f *fakeCleanup) ids() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.scheduled...)
}
