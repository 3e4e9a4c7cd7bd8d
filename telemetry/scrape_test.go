package telemetry_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.yaml.in/yaml/v3"

	"github.com/keyhook/keyhook/connect"
	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/telemetry"
	"github.com/keyhook/keyhook/tracking"
	"github.com/keyhook/keyhook/webhooks"
)

// A scripted run through a real node, scraped from /metrics: the counts
// are the ones the script implies, and every metric the shipped alert
// rules and Grafana dashboard use is one keyhook really exports.
func TestMetricsAfterAScriptedRunBackTheAlertsAndDashboard(t *testing.T) {
	p, err := telemetry.Setup(context.Background(), telemetry.Config{ServiceName: "keyhook", Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())

	const topic, n = "scraped", 50
	brokers := testutil.Kfake(t, 2, topic)
	rdb := testutil.StartRedis(t).Client()
	// As app.Build does for a node's client.
	if err := connect.CountRedisCommands(rdb, p.Meter); err != nil {
		t.Fatal(err)
	}
	sink := testutil.StartSink(t)
	var mu sync.Mutex
	seen := map[int64]int{}
	sink.Status = func(d *testutil.Delivery) int {
		mu.Lock()
		defer mu.Unlock()
		seen[d.Offset*10+int64(d.Partition)]++
		switch {
		case d.Partition == 0 && d.Offset == 5:
			return http.StatusBadRequest // dead-lettered
		case d.Partition == 1 && d.Offset == 7 && seen[71] == 1:
			return http.StatusBadGateway // retried once
		}
		return http.StatusOK
	}
	produceN(t, brokers, topic, n)

	tracker, err := tracking.New(rdb, tracking.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sender, err := webhooks.NewClient(webhooks.ClientConfig{Policy: webhooks.AddressPolicy{AllowPrivate: true}})
	if err != nil {
		t.Fatal(err)
	}
	sub := &subscription.Subscription{ID: "sub_scraped", Name: "scraped", Topics: []string{topic}, Endpoint: subscription.Endpoint{URL: sink.URL}, MaxInFlight: 4, Version: 1}
	sub.Normalize()
	node, err := dispatcher.New(dispatcher.Config{
		NodeID: "scraped", Brokers: brokers,
		Tuning: dispatcher.Tuning{
			CommitInterval: 50 * time.Millisecond,
			Retry:          webhooks.RetryPolicy{InitialInterval: 10 * time.Millisecond, MaxInterval: 20 * time.Millisecond},
		},
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		MeterProvider: p.Meter,
	}, fixedSubs{sub}, sender, tracker)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- node.Run(ctx) }()
	defer func() { cancel(); <-done }()
	sink.WaitAcked(t, n-1, 30*time.Second)

	var families map[string]*dto
	deadline := time.Now().Add(20 * time.Second)
	for {
		families = scrape(t, p.Metrics)
		if value(families, "keyhook_deliveries_total", `keyhook_outcome="dead_lettered"`) == 1 &&
			value(families, "keyhook_deliveries_total", `keyhook_outcome="delivered"`) == n-1 &&
			value(families, "keyhook_consumer_lag", "") == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, c := range []struct {
		name, labels string
		want         float64
	}{
		{"keyhook_records_fetched_total", "", n},
		{"keyhook_deliveries_total", `keyhook_outcome="delivered"`, n - 1},
		{"keyhook_deliveries_total", `keyhook_outcome="dead_lettered"`, 1},
		{"keyhook_delivery_attempts_total", `http_response_status_class="2xx"`, n - 1},
		{"keyhook_delivery_attempts_total", `http_response_status_class="5xx"`, 1},
		{"keyhook_delivery_attempts_total", `http_response_status_class="4xx"`, 1},
		{"keyhook_dead_letters_total", "", 1},
		{"keyhook_partitions_owned", "", 2},
		{"keyhook_partitions_total", "", 2},
		{"keyhook_delivery_duration_seconds_count", "", n},
		{"keyhook_end_to_end_latency_seconds_count", "", n},
	} {
		if got := value(families, c.name, c.labels); got != c.want {
			t.Errorf("%s{%s} = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if got := value(families, "keyhook_redis_commands_total", ""); got < 1 {
		t.Errorf("keyhook_redis_commands_total = %v; want the node's Redis commands counted", got)
	}
	for _, name := range []string{"keyhook_consumer_lag", "keyhook_watermark_distance", "keyhook_pending", "keyhook_partition_paused", "keyhook_in_flight", "keyhook_retrying", "keyhook_tracking_flush_duration_seconds", "keyhook_kafka_commit_duration_seconds", "keyhook_commit_interval_seconds", "keyhook_rebalances_total"} {
		if families[name] == nil {
			t.Errorf("metric %s missing", name)
		}
	}
	for name := range families {
		for _, bad := range []string{"key=", "offset="} {
			if strings.Contains(families[name].labels, bad) {
				t.Errorf("metric %s has an unbounded label %s", name, bad)
			}
		}
	}

	// The operators' kit names only metrics that exist.
	root := filepath.Join("..", "deploy")
	rulesFile, err := os.ReadFile(filepath.Join(root, "prometheus", "keyhook-alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Name  string
			Rules []struct {
				Alert, Expr string
				For         string
				Labels      map[string]string
				Annotations map[string]string
			}
		}
	}
	if err := yaml.Unmarshal(rulesFile, &rules); err != nil {
		t.Fatalf("alert rules: %v", err)
	}
	var exprs []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("alert rule %+v lacks a name, expression, severity or summary", r)
			}
			if r.For != "" {
				if _, err := model.ParseDuration(r.For); err != nil {
					t.Errorf("alert %s: for %q: %v", r.Alert, r.For, err)
				}
			}
			exprs = append(exprs, r.Expr)
		}
	}
	dashFile, err := os.ReadFile(filepath.Join(root, "grafana", "keyhook-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(dashFile, &dash); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	if dash.Title == "" || len(dash.Panels) == 0 {
		t.Fatalf("dashboard has no title or panels")
	}
	for _, panel := range dash.Panels {
		if len(panel.Targets) == 0 {
			t.Errorf("panel %q has no query", panel.Title)
		}
		for _, target := range panel.Targets {
			exprs = append(exprs, target.Expr)
		}
	}
	metricName := regexp.MustCompile(`\bkeyhook_[a-z_]+`)
	var missing []string
	for _, e := range exprs {
		for _, m := range metricName.FindAllString(e, -1) {
			if !exported(families, m) && !isLabel(m) {
				missing = append(missing, m)
			}
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		t.Errorf("alerts or dashboard use metrics keyhook does not export: %v", missing)
	}
}

// fixedSubs is a subscription source that never changes.
type fixedSubs []*subscription.Subscription

func (s fixedSubs) Watch(ctx context.Context, _ time.Duration, fn func([]*subscription.Subscription)) error {
	fn(s)
	<-ctx.Done()
	return nil
}

// produceN writes n records alternating over two partitions.
func produceN(t *testing.T, brokers []string, topic string, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range n {
		rec := &kgo.Record{Topic: topic, Partition: int32(i % 2), Key: fmt.Appendf(nil, "k%d", i%5), Value: fmt.Appendf(nil, "v%d", i)}
		if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// dto is one scraped metric family: its samples by label string.
type dto struct {
	samples map[string]float64
	labels  string
}

func scrape(t *testing.T, h http.Handler) map[string]*dto {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	out := map[string]*dto{}
	add := func(name, labels string, v float64) {
		d := out[name]
		if d == nil {
			d = &dto{samples: map[string]float64{}}
			out[name] = d
		}
		d.samples[labels] += v
		d.labels += labels + " "
	}
	for name, mf := range mfs {
		for _, m := range mf.Metric {
			var ls []string
			for _, l := range m.Label {
				ls = append(ls, l.GetName()+`="`+l.GetValue()+`"`)
			}
			labels := strings.Join(ls, ",")
			switch {
			case m.Counter != nil:
				add(name, labels, m.Counter.GetValue())
			case m.Gauge != nil:
				add(name, labels, m.Gauge.GetValue())
			case m.Histogram != nil:
				add(name, labels, 0)
				add(name+"_count", labels, float64(m.Histogram.GetSampleCount()))
				add(name+"_sum", labels, m.Histogram.GetSampleSum())
				add(name+"_bucket", labels, 0)
			}
		}
	}
	return out
}

// value sums the samples of name whose labels contain want.
func value(f map[string]*dto, name, want string) float64 {
	d := f[name]
	if d == nil {
		return -1
	}
	var sum float64
	for labels, v := range d.samples {
		if strings.Contains(labels, want) {
			sum += v
		}
	}
	return sum
}

func exported(f map[string]*dto, name string) bool { return f[name] != nil }

// isLabel tells label names (keyhook_subscription...) from metric names.
func isLabel(s string) bool {
	switch s {
	case "keyhook_subscription", "keyhook_outcome", "keyhook_operation", "keyhook_rebalance", "keyhook_reason":
		return true
	}
	return false
}
