package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestParseCountReadsJmxToolsCSVLines(t *testing.T) {
	// Lines as JmxTool --report-format csv printed them for Kafka 4.1.1.
	name, v, ok := parseCount(`kafka.server:type=BrokerTopicMetrics,name=BytesOutPerSec,topic=fanout-dnc5q5ynrlu6:Count,"406376"`)
	if !ok || name["name"] != "BytesOutPerSec" || name["topic"] != "fanout-dnc5q5ynrlu6" || v != 406376 {
		t.Fatalf("got %v %v %v", name, v, ok)
	}
	name, v, ok = parseCount(`kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec:Count,"532425"`)
	if !ok || name["topic"] != "" || name["name"] != "BytesInPerSec" || v != 532425 {
		t.Fatalf("broker-wide line: got %v %v %v", name, v, ok)
	}
	for _, line := range []string{`time,"1796408740823"`, "", `kafka.server:type=X:Count,"n/a"`} {
		if _, _, ok := parseCount(line); ok {
			t.Errorf("%q parsed as a count", line)
		}
	}
}

func TestTheSinkCountsFirstDeliveriesDuplicatesAndKeyOrderViolations(t *testing.T) {
	s, err := newSink(2, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	now := time.Now().UnixNano()
	for range 4 { // seq 0, 2 have key 0; 1, 3 key 1
		s.register(now)
	}
	post := func(sub, seq int) int {
		t.Helper()
		resp, err := http.Post(fmt.Sprintf("%s/s/%d", s.url, sub), "text/plain", strings.NewReader(fmt.Sprintf("%d %d", seq, now)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// Subscription 0 gets key 0 in order, then again (a duplicate);
	// subscription 1 gets key 0's records the wrong way round.
	for _, d := range [][2]int{{0, 0}, {0, 2}, {0, 2}, {1, 2}, {1, 0}, {0, 1}} {
		if code := post(d[0], d[1]); code != http.StatusNoContent {
			t.Fatalf("delivery %v answered %d", d, code)
		}
	}
	s.down.Store(2) // subscription 1 down
	if code := post(1, 3); code != http.StatusServiceUnavailable {
		t.Fatalf("the downed subscription answered %d", code)
	}
	s.mu.Lock()
	dups, reorder, refusedAt := s.dups, s.reorder, s.at(1, 3)
	s.mu.Unlock()
	if dups[0] != 1 || reorder[0] != 0 || dups[1] != 0 || reorder[1] != 1 {
		t.Fatalf("dups %v reorder %v", dups, reorder)
	}
	if got := s.missing([]int{0, 1}, 0, 4); got != 3 { // 0: seq 3; 1: seqs 1, 3
		t.Fatalf("missing %d, want 3", got)
	}
	if refusedAt != 0 || s.refused.Load() != 1 {
		t.Fatal("a refused delivery counted as delivered")
	}
	if code := post(0, 9); code != http.StatusBadRequest || s.bad.Load() != 1 {
		t.Fatalf("an unregistered record answered %d", code)
	}
}

func TestPctIsTheNearestRank(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	if pct(d, 0.5) != 50*time.Millisecond || pct(d, 0.99) != 99*time.Millisecond || pct(d, 1) != 100*time.Millisecond || pct(nil, 0.99) != 0 {
		t.Fatalf("p50 %v p99 %v max %v", pct(d, 0.5), pct(d, 0.99), pct(d, 1))
	}
}

// TestTheCeilingsSendEveryBurstToEverySubscription runs both ceiling
// clients against a sink: each request of each burst arrives, keyhook's
// client signs its requests, and net/http sends the headers keyhook sent
// (as the load phase's sink captured them).
func TestTheCeilingsSendEveryBurstToEverySubscription(t *testing.T) {
	main, err := newSink(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer main.close()
	main.header.Store(&http.Header{"Webhook-Id": {"from-keyhook"}, "Content-Length": {"9"}})
	b := &bench{c: config{subs: 3, keys: 2, drain: 10 * time.Second}, sink: main, topic: "t"}
	for _, build := range []func(*sink) (ceilingClient, error){b.keyhookClient, b.netHTTPClient} {
		s, err := newSink(b.c.subs, b.c.keys)
		if err != nil {
			t.Fatal(err)
		}
		c, err := build(s)
		if err != nil {
			t.Fatal(err)
		}
		f := &fanner{c: c, sink: s, subs: b.c.subs}
		from, to := f.run(context.Background(), 20, 200*time.Millisecond)
		c.close()
		if to-from < 2 {
			t.Fatalf("%s: %d bursts in 200ms at 20/s", c.name, to-from)
		}
		if n := f.failed.Load(); n > 0 {
			t.Fatalf("%s: %d requests failed", c.name, n)
		}
		if left := s.missing([]int{0, 1, 2}, from, to); left > 0 {
			t.Fatalf("%s: %d requests missing", c.name, left)
		}
		if lat, complete := fanoutLatencyOf(s, []int{0, 1, 2}, from, to); complete != to-from || lat[0] <= 0 {
			t.Fatalf("%s: latencies %v of %d bursts", c.name, lat, to-from)
		}
		h := s.header.Load()
		switch {
		case h == nil:
			t.Fatalf("%s: no request header seen", c.name)
		case c.name == "Go's net/http client" && h.Get("Webhook-Id") != "from-keyhook":
			t.Fatalf("net/http did not send keyhook's headers: %v", *h)
		case c.name != "Go's net/http client" && h.Get("Webhook-Signature") == "":
			t.Fatalf("%s: request not signed: %v", c.name, *h)
		}
		s.close()
	}
}
