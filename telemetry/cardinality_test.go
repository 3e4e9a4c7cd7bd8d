package telemetry_test

import (
	"context"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/keyhook/keyhook/telemetry"
)

// scrapeSeries counts, in one scrape of p's /metrics, the series of the
// counter family name that carry a subscription label, and those the
// SDK merged into its overflow series.
func scrapeSeries(t *testing.T, p *telemetry.Providers, name string) (labelled, overflow int) {
	t.Helper()
	rec := httptest.NewRecorder()
	p.Metrics.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for line := range strings.SplitSeq(rec.Body.String(), "\n") {
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		switch {
		case strings.Contains(line, `otel_metric_overflow="true"`):
			overflow++
		case strings.Contains(line, `keyhook_subscription="`):
			labelled++
		}
	}
	return labelled, overflow
}

// A node with thousands of subscriptions keeps a series per subscription:
// the SDK's default cap of 2,000 series an instrument merged the rest into
// one series without labels (at 1,000 subscriptions, most of the per-
// partition lag and the delivery counts). An operator's own
// OTEL_GO_X_CARDINALITY_LIMIT still applies.
func TestEverySubscriptionKeepsItsOwnSeriesPastTheSDKsDefaultCap(t *testing.T) {
	const subs = 2500 // past the SDK's default of 2,000
	for _, tt := range []struct {
		name     string
		env      map[string]string
		overflow bool
	}{
		{name: "no limit set", env: nil, overflow: false},
		{name: "the operator's limit", env: map[string]string{"OTEL_GO_X_CARDINALITY_LIMIT": "100"}, overflow: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := telemetry.Setup(context.Background(), telemetry.Config{ServiceName: "keyhook", Getenv: func(k string) string { return tt.env[k] }})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Shutdown(context.Background())
			c, err := p.Meter.Meter("test").Int64Counter("keyhook.deliveries")
			if err != nil {
				t.Fatal(err)
			}
			for i := range subs {
				c.Add(context.Background(), 1, metric.WithAttributes(attribute.String("keyhook.subscription", "sub-"+strconv.Itoa(i))))
			}
			labelled, overflow := scrapeSeries(t, p, "keyhook_deliveries_total")
			if tt.overflow {
				if overflow != 1 || labelled != 99 {
					t.Fatalf("with the operator's limit of 100: %d labelled series, %d overflow; want 99 and one", labelled, overflow)
				}
				return
			}
			if labelled != subs || overflow != 0 {
				t.Fatalf("%d subscriptions: %d series with their label, %d merged into the overflow series", subs, labelled, overflow)
			}
		})
	}
}

// A limit that is not a number is refused, naming the variable.
func TestACardinalityLimitThatIsNotANumberIsRefused(t *testing.T) {
	_, err := telemetry.Setup(context.Background(), telemetry.Config{ServiceName: "keyhook", Getenv: func(k string) string {
		if k == "OTEL_GO_X_CARDINALITY_LIMIT" {
			return "lots"
		}
		return ""
	}})
	if err == nil || !strings.Contains(err.Error(), "OTEL_GO_X_CARDINALITY_LIMIT") {
		t.Fatalf("got %v; want an error naming OTEL_GO_X_CARDINALITY_LIMIT", err)
	}
}
