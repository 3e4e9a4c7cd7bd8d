package testutil

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSinkReadsABatchAsOneDeliveryPerRecord: a batch request is recorded
// as the deliveries of its records, in order, each with the value its own
// request would have carried, and records of one key sent together in a
// batch are no order violation.
func TestSinkReadsABatchAsOneDeliveryPerRecord(t *testing.T) {
	s := StartSink(t)
	body := `{"deliveries":[` +
		`{"id":"d1","key":"k","value":"{\"seq\":1}","attributes":{"topic":"orders","partition":"2","offset":"7"}},` +
		`{"id":"d2","key":"k","value":{"seq":2},"attributes":{"topic":"orders","partition":"2","offset":"8"}},` +
		`{"id":"d3","key":null,"value_base64":"AAE=","attributes":{"topic":"orders","partition":"2","offset":"9"}}]}`
	req, _ := http.NewRequest(http.MethodPost, s.URL, strings.NewReader(body))
	req.Header.Set("Webhook-Id", "batch-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	type got struct {
		Topic     string
		Partition int32
		Offset    int64
		Key, ID   string
		Body      string
		Batch     string
	}
	var gots []got
	for _, d := range s.Deliveries() {
		gots = append(gots, got{d.Topic, d.Partition, d.Offset, d.Key, d.ID, string(d.Body), d.Batch})
	}
	want := []got{
		{"orders", 2, 7, "k", "d1", `{"seq":1}`, "batch-1"},
		{"orders", 2, 8, "k", "d2", `{"seq":2}`, "batch-1"},
		{"orders", 2, 9, "", "d3", "\x00\x01", "batch-1"},
	}
	if diff := cmp.Diff(want, gots); diff != "" {
		t.Fatalf("deliveries (-want +got):\n%s", diff)
	}
	if v := s.KeyOrderViolations(); len(v) > 0 {
		t.Errorf("records of one key in one batch reported as order violations: %v", v)
	}
	if n := s.AckedCount(); n != 3 {
		t.Errorf("%d records acked, want 3", n)
	}
}
