package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/app"
	"github.com/keyhook/keyhook/auth"
	"github.com/keyhook/keyhook/deliverylog"
	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/events"
	"github.com/keyhook/keyhook/internal/keyspace"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/monitor"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/webhooks"
)

// runNode builds a whole node over rdb with the test's changes to its
// config and runs it until stop (or the test's end).
func runNode(t *testing.T, brokers []string, rdb *redis.Client, token string, mod func(*app.Config)) (n *testNode, stop func()) {
	t.Helper()
	cfg := app.Config{
		NodeID: "node-a", Brokers: brokers, HTTPAddr: "127.0.0.1:0", BootstrapToken: token,
		AllowPrivateEndpoints: true, Logger: slog.New(slog.DiscardHandler),
		Tuning: dispatcher.Tuning{CommitInterval: 20 * time.Millisecond, SessionTimeout: 6 * time.Second, ResyncInterval: 100 * time.Millisecond},
	}
	if mod != nil {
		mod(&cfg)
	}
	a, err := app.Build(context.Background(), cfg, app.Deps{Redis: rdb})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("Run did not return within 30s of the context ending")
		}
	}
	t.Cleanup(stop)
	return &testNode{base: "http://" + a.APIAddr(), token: token, rdb: rdb, brokers: brokers}, stop
}

// endpoint is a real HTTP endpoint whose answer the test switches; it
// counts each record's requests by webhook-id and keeps the ids it
// answered 2xx.
type endpoint struct {
	srv       *httptest.Server
	status    atomic.Int32
	mu        sync.Mutex
	requests  int
	delivered map[string]bool
	ids       []string
}

func newEndpoint(t *testing.T, status int) *endpoint {
	e := &endpoint{delivered: map[string]bool{}}
	e.status.Store(int32(status))
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		st := int(e.status.Load())
		e.mu.Lock()
		e.requests++
		id := r.Header.Get("webhook-id")
		if len(e.ids) == 0 || e.ids[len(e.ids)-1] != id {
			e.ids = append(e.ids, id)
		}
		if st < 300 {
			e.delivered[string(r.Header.Get("keyhook-key"))] = true
		}
		e.mu.Unlock()
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(st)
		if st >= 300 {
			_, _ = io.WriteString(w, "busy, try later")
		}
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *endpoint) got(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.delivered[key]
}

func (e *endpoint) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.requests
}

// operatorEndpoint is the operator's events endpoint: it keeps the events
// whose Standard Webhooks signature the library verifies.
type operatorEndpoint struct {
	srv  *httptest.Server
	mu   sync.Mutex
	evs  []events.Event
	bad  int
	hook *standardwebhooks.Webhook
}

func newOperatorEndpoint(t *testing.T, secret string) *operatorEndpoint {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	o := &operatorEndpoint{hook: wh}
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		o.mu.Lock()
		defer o.mu.Unlock()
		var ev events.Event
		if wh.Verify(body, r.Header) != nil || json.Unmarshal(body, &ev) != nil {
			o.bad++
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		o.evs = append(o.evs, ev)
	}))
	t.Cleanup(o.srv.Close)
	return o
}

func (o *operatorEndpoint) events() ([]events.Event, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]events.Event(nil), o.evs...), o.bad
}

func TestAFailingEndpointPausesItsSubscriptionUntilResumedAndLosesNothing(t *testing.T) {
	brokers := testutil.Kfake(t, 1, "orders")
	rdb := testutil.StartRedis(t).Client()
	secret, err := webhooks.GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	op := newOperatorEndpoint(t, secret)
	var skew atomic.Int64 // how far the streak's clock is ahead of the wall clock
	node, _ := runNode(t, brokers, rdb, auth.Generate(), func(c *app.Config) {
		c.Events = app.EventsConfig{URL: op.srv.URL, Secret: secret}
		c.AutoPauseClock = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	})
	ep := newEndpoint(t, 503)
	var sub struct{ ID string }
	if code := node.call(t, http.MethodPost, "/v1/subscriptions", `{"name":"orders","topics":["orders"],"endpoint":{"url":"`+ep.srv.URL+`"},
		"dead_letter_topic":"none","disable_after":"1m","retry":{"initial_interval_ms":20,"max_interval_ms":100}}`, &sub); code != http.StatusCreated {
		t.Fatalf("create = %d", code)
	}
	ctx := context.Background()
	since := func() time.Time {
		s, err := monitor.Since(ctx, rdb, keyspace.Keyspace{}, sub.ID)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	// A failure starts the streak; a success ends it.
	produce(t, brokers, "orders", &kgo.Record{Key: []byte("k1"), Value: []byte("1")})
	eventually(t, 15*time.Second, "a streak started by the 503s", func() bool { return !since().IsZero() })
	first := since()
	ep.status.Store(200)
	eventually(t, 15*time.Second, "k1 delivered once the endpoint answers", func() bool { return ep.got("k1") })
	eventually(t, 5*time.Second, "the streak ended by the success", func() bool { return since().IsZero() })

	// A new streak, judged as though a minute had passed: the subscription
	// is paused, with the reason, by "auto".
	ep.status.Store(503)
	produce(t, brokers, "orders", &kgo.Record{Key: []byte("k2"), Value: []byte("2")})
	eventually(t, 15*time.Second, "a new streak", func() bool { return !since().IsZero() })
	if s := since(); !s.After(first) {
		t.Fatalf("the new streak starts at %v, not after the first one's %v: the success did not reset it", s, first)
	}
	skew.Store(int64(2 * time.Minute))
	type shown struct {
		Paused       bool   `json:"paused"`
		PausedBy     string `json:"paused_by"`
		PausedReason string `json:"paused_reason"`
	}
	var got shown
	eventually(t, 15*time.Second, "the subscription paused", func() bool {
		node.call(t, http.MethodGet, "/v1/subscriptions/"+sub.ID, "", &got)
		return got.Paused
	})
	if got.PausedBy != "auto" || !strings.HasPrefix(got.PausedReason, "endpoint failing since ") || !strings.HasSuffix(got.PausedReason, "(disable_after 1m)") {
		t.Fatalf("paused by %q because %q, want by auto, endpoint failing since … (disable_after 1m)", got.PausedBy, got.PausedReason)
	}
	var st shown
	if code := node.call(t, http.MethodGet, "/v1/subscriptions/"+sub.ID+"/status", "", &st); code != http.StatusOK || st != got {
		t.Fatalf("status = %d %+v, want the subscription's %+v", code, st, got)
	}
	eventually(t, 15*time.Second, "the auto_paused event, signed", func() bool {
		evs, _ := op.events()
		return len(evs) > 0
	})
	evs, bad := op.events()
	if bad > 0 || len(evs) != 1 || evs[0].Type != events.TypeSubscriptionAutoPaused || evs[0].Subscription != sub.ID {
		t.Fatalf("operator got %+v (%d refused), want one subscription.auto_paused of %s", evs, bad, sub.ID)
	}
	// Paused: no more requests once the node let go.
	time.Sleep(500 * time.Millisecond)
	before := ep.count()
	time.Sleep(time.Second)
	if after := ep.count(); after != before {
		t.Fatalf("the endpoint got %d requests in 1s while the subscription was paused", after-before)
	}

	// A resume clears the reason and the streak; k2 then goes.
	skew.Store(0)
	ep.status.Store(200)
	var resumed map[string]any
	if code := node.call(t, http.MethodPost, "/v1/subscriptions/"+sub.ID+"/resume", "", &resumed); code != http.StatusOK {
		t.Fatalf("resume = %d", code)
	}
	if _, ok := resumed["paused_by"]; ok || resumed["paused"] != false || resumed["paused_reason"] != nil {
		t.Fatalf("after resume: %v, want paused false without paused_by and paused_reason", resumed)
	}
	if s := since(); !s.IsZero() {
		t.Fatalf("streak after the resume starts at %v, want none", s)
	}
	eventually(t, 20*time.Second, "k2 delivered after the resume", func() bool { return ep.got("k2") })
}

func TestTheDeliveryLogKeepsAttemptsAcrossARestartWithinItsCap(t *testing.T) {
	brokers := testutil.Kfake(t, 1, "orders")
	rdb := testutil.StartRedis(t).Client()
	token := auth.Generate()
	withLog := func(c *app.Config) { c.DeliveryLog = app.DeliveryLogConfig{Enabled: true, MaxDeliveries: 3} }
	node, stop := runNode(t, brokers, rdb, token, withLog)

	// The first request of every record is refused with 503, the second
	// taken.
	var mu sync.Mutex
	seen := map[string]int{}
	delivered := map[string]string{} // key -> delivery id
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		defer mu.Unlock()
		id := r.Header.Get("webhook-id")
		seen[id]++
		if seen[id] == 1 {
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "warming up")
			return
		}
		delivered[r.Header.Get("keyhook-key")] = id
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	var sub struct{ ID string }
	if code := node.call(t, http.MethodPost, "/v1/subscriptions", `{"name":"orders","topics":["orders"],"endpoint":{"url":"`+srv.URL+`"},
		"retry":{"initial_interval_ms":20,"max_interval_ms":100}}`, &sub); code != http.StatusCreated {
		t.Fatalf("create = %d", code)
	}
	produce(t, brokers, "orders", &kgo.Record{Key: []byte("k0"), Value: []byte("0")})
	var firstID string
	eventually(t, 15*time.Second, "k0 delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		firstID = delivered["k0"]
		return firstID != ""
	})
	path := "/v1/subscriptions/" + sub.ID + "/deliveries/" + firstID
	var d deliverylog.Delivery
	eventually(t, 5*time.Second, "the delivery logged", func() bool {
		return node.call(t, http.MethodGet, path, "", &d) == http.StatusOK && len(d.Attempts) == 2
	})
	a1, a2 := d.Attempts[0], d.Attempts[1]
	if a1.Status != 503 || a1.Result != "retry" || a1.Body != "warming up" || a1.Headers["Content-Type"] != "text/plain" || a1.Number != 1 {
		t.Errorf("first attempt = %+v, want 503, retry, body \"warming up\", Content-Type text/plain, number 1", a1)
	}
	if a2.Status != 200 || a2.Result != "delivered" || a2.Number != 2 || !a2.Time.After(a1.Time) || a2.LatencyMS <= 0 {
		t.Errorf("second attempt = %+v, want 200, delivered, number 2, later, with a latency", a2)
	}
	if d.Topic != "orders" || d.Partition != 0 || d.Offset != 0 {
		t.Errorf("delivery of %s/%d/%d, want orders/0/0", d.Topic, d.Partition, d.Offset)
	}
	var failures deliverylog.Page
	if code := node.call(t, http.MethodGet, "/v1/subscriptions/"+sub.ID+"/deliveries?status=failed", "", &failures); code != http.StatusOK || len(failures.Items) != 1 || failures.Items[0].DeliveryID != firstID {
		t.Fatalf("recent failures = %d %+v, want %s", code, failures, firstID)
	}
	var problem struct {
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if code := node.call(t, http.MethodGet, "/v1/subscriptions/"+sub.ID+"/deliveries/dlv_unknown", "", &problem); code != http.StatusNotFound || !strings.Contains(problem.Detail, "dlv_unknown") {
		t.Fatalf("unknown delivery = %d %+v, want a 404 problem naming it", code, problem)
	}

	// The cap: 3 deliveries kept of the subscription's 5.
	for _, k := range []string{"k1", "k2", "k3", "k4"} {
		produce(t, brokers, "orders", &kgo.Record{Key: []byte(k), Value: []byte(k)})
	}
	eventually(t, 15*time.Second, "k1..k4 delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(delivered) == 5
	})
	ks := keyspace.Keyspace{}
	eventually(t, 5*time.Second, "k4's delivery logged", func() bool {
		mu.Lock()
		id := delivered["k4"]
		mu.Unlock()
		return rdb.LLen(context.Background(), ks.DeliveryAttempts(sub.ID, id)).Val() == 2
	})
	if n := rdb.ZCard(context.Background(), ks.DeliveryRecent(sub.ID)).Val(); n != 3 {
		t.Fatalf("deliveries kept = %d, want the cap, 3", n)
	}
	if code := node.call(t, http.MethodGet, path, "", nil); code != http.StatusNotFound {
		t.Fatalf("the oldest delivery past the cap = %d, want 404", code)
	}

	// A node started over the same Redis reads what the stopped one wrote.
	stop()
	mu.Lock()
	lastID := delivered["k4"]
	mu.Unlock()
	again, _ := runNode(t, brokers, rdb, token, withLog)
	var after deliverylog.Delivery
	if code := again.call(t, http.MethodGet, "/v1/subscriptions/"+sub.ID+"/deliveries/"+lastID, "", &after); code != http.StatusOK || len(after.Attempts) != 2 {
		t.Fatalf("after a restart = %d %+v, want k4's two attempts", code, after)
	}
}

// An endpoint origin's breaker opening and closing reach the operator as
// signed events, once each: a failed probe reopening it is the same
// outage and sends nothing more.
func TestABreakerOpeningAndClosingAreSentAsEvents(t *testing.T) {
	brokers := testutil.Kfake(t, 1, "orders")
	rdb := testutil.StartRedis(t).Client()
	secret, err := webhooks.GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	op := newOperatorEndpoint(t, secret)
	node, _ := runNode(t, brokers, rdb, auth.Generate(), func(c *app.Config) {
		c.Events = app.EventsConfig{URL: op.srv.URL, Secret: secret}
		c.BreakerFailures, c.BreakerInterval = 3, 300*time.Millisecond
	})
	ep := newEndpoint(t, 503)
	if code := node.call(t, http.MethodPost, "/v1/subscriptions", `{"name":"orders","topics":["orders"],"endpoint":{"url":"`+ep.srv.URL+`"},
		"dead_letter_topic":"none","retry":{"initial_interval_ms":20,"max_interval_ms":100}}`, nil); code != http.StatusCreated {
		t.Fatalf("create = %d", code)
	}
	for _, k := range []string{"k1", "k2", "k3", "k4"} {
		produce(t, brokers, "orders", &kgo.Record{Key: []byte(k), Value: []byte(k)})
	}
	ofType := func(typ string) []events.Event {
		evs, _ := op.events()
		var out []events.Event
		for _, ev := range evs {
			if ev.Type == typ {
				out = append(out, ev)
			}
		}
		return out
	}
	eventually(t, 15*time.Second, "an endpoint.breaker_opened event", func() bool { return len(ofType(events.TypeBreakerOpened)) > 0 })
	// Probes fail for a few intervals: still the one outage.
	time.Sleep(time.Second)
	ep.status.Store(200)
	eventually(t, 15*time.Second, "every key delivered once the endpoint answers", func() bool {
		return ep.got("k1") && ep.got("k2") && ep.got("k3") && ep.got("k4")
	})
	eventually(t, 5*time.Second, "an endpoint.breaker_closed event", func() bool { return len(ofType(events.TypeBreakerClosed)) > 0 })
	opened, closed := ofType(events.TypeBreakerOpened), ofType(events.TypeBreakerClosed)
	if len(opened) != 1 || len(closed) != 1 {
		t.Fatalf("%d opened and %d closed events for one outage, want one each", len(opened), len(closed))
	}
	var o events.BreakerOpened
	var c events.BreakerClosed
	if err := json.Unmarshal(opened[0].Data, &o); err != nil || !strings.HasPrefix(ep.srv.URL, o.Origin) || o.Failures != 3 || o.ProbeIntervalMS != 300 {
		t.Errorf("opened event %s (%v): want the endpoint's origin, 3 failures and a 300ms probe interval", opened[0].Data, err)
	}
	if err := json.Unmarshal(closed[0].Data, &c); err != nil || c.Origin != o.Origin || c.OpenMS < 1000 {
		t.Errorf("closed event %s (%v): want the same origin, open for at least the second it failed", closed[0].Data, err)
	}
	if _, bad := op.events(); bad != 0 {
		t.Errorf("%d events failed their signature check", bad)
	}
}

// With the shared read a subscription's consumer group has no member, so
// a seek cannot wait for it to empty: it waits until every node said it
// owns none of the subscription's partitions. A seek to the earliest
// offset then delivers every record once more and moves the commit back
// to the end after that, with no cursor writing its old state over it.
func TestASeekWithTheSharedReadRedeliversFromTheStart(t *testing.T) {
	brokers := testutil.Kfake(t, 1, "orders")
	rdb := testutil.StartRedis(t).Client()
	node, _ := runNode(t, brokers, rdb, auth.Generate(), func(c *app.Config) { c.SharedRead = true })
	ep := newEndpoint(t, 200)
	var sub struct{ ID string }
	if code := node.call(t, http.MethodPost, "/v1/subscriptions", `{"name":"orders","topics":["orders"],"endpoint":{"url":"`+ep.srv.URL+`"},
		"dead_letter_topic":"none","start":"earliest"}`, &sub); code != http.StatusCreated {
		t.Fatalf("create = %d", code)
	}
	const n = 20
	for i := range n {
		produce(t, brokers, "orders", &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")})
	}
	eventually(t, 20*time.Second, "every record delivered", func() bool { return ep.count() == n })
	group := (&subscription.Subscription{ID: sub.ID}).GroupID()
	adm := testutil.Admin(t, brokers)
	testutil.WaitCommitted(t, adm, group, map[int32]int64{0: n}, 20*time.Second)

	if code := node.call(t, http.MethodPost, "/v1/subscriptions/"+sub.ID+"/seek", `{"to":"earliest"}`, nil); code != http.StatusOK {
		t.Fatalf("seek = %d", code)
	}
	eventually(t, 30*time.Second, "every record delivered again after the seek", func() bool { return ep.count() == 2*n })
	testutil.WaitCommitted(t, adm, group, map[int32]int64{0: n}, 20*time.Second)
	time.Sleep(time.Second)
	if c := ep.count(); c != 2*n {
		t.Errorf("%d requests after the seek settled, want %d: each record once before and once after", c, 2*n)
	}
}
