package serve

import (
	"strings"
	"testing"
)

// A scrape yields the unlabelled series by name, and counts every sample
// and those of the SDK's overflow series.
func TestParseScrapeCountsSeriesAndOverflow(t *testing.T) {
	const text = `# HELP go_goroutines Number of goroutines.
# TYPE go_goroutines gauge
go_goroutines 1074
process_resident_memory_bytes 2.5e+08
keyhook_consumer_lag{keyhook_subscription="a",messaging_destination_partition_id="0"} 3
keyhook_consumer_lag{otel_metric_overflow="true",otel_scope_name="x"} 0
keyhook_deliveries_total{otel_metric_overflow="true"} 154000

`
	sc, err := parseScrape(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if sc.series != 5 || sc.overflow != 2 {
		t.Fatalf("series %d overflow %d; want 5 and 2", sc.series, sc.overflow)
	}
	if sc.unlabelled["go_goroutines"] != 1074 || sc.unlabelled["process_resident_memory_bytes"] != 2.5e8 {
		t.Fatalf("unlabelled %v", sc.unlabelled)
	}
}
