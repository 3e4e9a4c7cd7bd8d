package testutil

import (
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

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

// TestSinkKeyOverlapsFindsTwoRequestsOfAKeyInFlightTogether: a request
// that arrives while an earlier one of its key and partition is in flight
// is an overlap — also when the earlier one is later abandoned by its
// sender — while requests of a key one after the other, of different keys,
// or of one key in different partitions are not. Each delivery names its
// sender through the origin resolver.
func TestSinkKeyOverlapsFindsTwoRequestsOfAKeyInFlightTogether(t *testing.T) {
	type req struct {
		partition int
		key       string
		offset    int64
		// after is when the request is sent, from the case's start; the
		// sink answers each in 200ms.
		after time.Duration
		// abandon makes the sender give up after 50ms.
		abandon bool
	}
	tests := []struct {
		name string
		reqs []req
		want []int64 // the later offsets of the overlaps
	}{
		{"one after the other", []req{{0, "k", 1, 0, false}, {0, "k", 2, 300 * time.Millisecond, false}}, nil},
		{"together", []req{{0, "k", 1, 0, false}, {0, "k", 2, 100 * time.Millisecond, false}}, []int64{2}},
		{"different keys together", []req{{0, "k", 1, 0, false}, {0, "j", 2, 100 * time.Millisecond, false}}, nil},
		{"one key, two partitions", []req{{0, "k", 1, 0, false}, {1, "k", 2, 100 * time.Millisecond, false}}, nil},
		{"sent while an abandoned one was still served", []req{{0, "k", 1, 0, true}, {0, "k", 2, 20 * time.Millisecond, false}}, []int64{2}},
		{"sent after the sink noticed the abandon", []req{{0, "k", 1, 0, true}, {0, "k", 2, 150 * time.Millisecond, false}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := StartSink(t)
			s.Latency = func(*Delivery) time.Duration { return 200 * time.Millisecond }
			s.SetOrigin(func(client, server net.Addr) string {
				if _, ok := SocketOwner(client, server, []int{os.Getpid()}); ok {
					return "me"
				}
				return "unknown"
			})
			start := time.Now()
			var wg sync.WaitGroup
			for _, r := range tt.reqs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					time.Sleep(time.Until(start.Add(r.after)))
					cl := &http.Client{Transport: &http.Transport{}}
					if r.abandon {
						cl.Timeout = 50 * time.Millisecond
					}
					req, _ := http.NewRequest(http.MethodPost, s.URL, strings.NewReader("{}"))
					req.Header.Set("Keyhook-Topic", "orders")
					req.Header.Set("Keyhook-Partition", strconv.Itoa(r.partition))
					req.Header.Set("Keyhook-Offset", strconv.FormatInt(r.offset, 10))
					req.Header.Set("Keyhook-Key", r.key)
					if resp, err := cl.Do(req); err == nil {
						resp.Body.Close()
					}
				}()
			}
			wg.Wait()
			// The sink notices an abandoned request a moment after it
			// ends; wait until every request is recorded.
			deadline := time.Now().Add(5 * time.Second)
			for {
				s.mu.Lock()
				n := len(s.requests)
				s.mu.Unlock()
				if n == len(tt.reqs) || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			var got []int64
			for _, o := range s.KeyOverlaps() {
				got = append(got, o.Later.Offset)
				if o.Later.Origin != "me" || o.Earlier.Origin != "me" {
					t.Errorf("overlap %s: origins %q and %q, want both \"me\"", o, o.Earlier.Origin, o.Later.Origin)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("later offsets of the overlaps (-want +got):\n%s", diff)
			}
		})
	}
}
