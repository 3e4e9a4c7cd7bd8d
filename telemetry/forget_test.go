package telemetry_test

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/keyhook/keyhook/telemetry"
)

// A forgotten subscription's series leave the scrape, counters and
// histograms alike, also when recorded into afterwards; another
// subscription's stay.
func TestForgetSubscriptionDropsItsSeriesFromTheScrape(t *testing.T) {
	p, err := telemetry.Setup(context.Background(), telemetry.Config{ServiceName: "keyhook", Getenv: env(nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	m := p.Meter.Meter("test")
	c, _ := m.Int64Counter("keyhook.test.deliveries")
	h, _ := m.Float64Histogram("keyhook.test.duration", metric.WithUnit("s"))
	record := func(sub string) {
		attrs := metric.WithAttributes(attribute.String("keyhook.subscription", sub))
		c.Add(context.Background(), 1, attrs)
		h.Record(context.Background(), 0.1, attrs)
	}
	scrape := func() string {
		rec := httptest.NewRecorder()
		p.Metrics.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		b, _ := io.ReadAll(rec.Body)
		return string(b)
	}
	record("sub_gone")
	record("sub_kept")
	if before := strings.Count(scrape(), `keyhook_subscription="sub_gone"`); before == 0 {
		t.Fatal("the series are not scraped before the subscription is forgotten")
	}
	p.ForgetSubscription("sub_gone")
	record("sub_gone") // a delivery that ended as its group stopped
	body := scrape()
	if n := strings.Count(body, "sub_gone"); n != 0 {
		t.Errorf("%d lines name the forgotten subscription, want none:\n%s", n, body)
	}
	for _, want := range []string{`keyhook_test_deliveries_total{keyhook_subscription="sub_kept"`, `keyhook_test_duration_seconds_count{keyhook_subscription="sub_kept"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the other subscription's %s is gone", want)
		}
	}
}
