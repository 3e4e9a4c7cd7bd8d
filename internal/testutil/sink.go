package testutil

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Delivery is one request a Sink answered.
type Delivery struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       string
	ID        string
	Attempt   int
	Status    int
	Start     time.Time
	End       time.Time
	Body      []byte
	Header    http.Header
	// Batch is the webhook-id of the batch request the record came in,
	// empty for a request of its own.
	Batch string
	// Origin names the process that sent the request, as the sink's
	// origin resolver (SetOrigin) said when its connection opened; empty
	// without one.
	Origin string
}

// TP names a partition.
type TP struct {
	Topic     string
	Partition int32
}

// Sink is a real HTTP endpoint that records every delivery keyhook makes.
// It marks a record acked before it answers 2xx, so at any moment what
// keyhook believes acked is a subset of what the sink recorded.
type Sink struct {
	URL string
	// Latency, when set, is how long the sink takes to answer d.
	Latency func(d *Delivery) time.Duration
	// Status, when set, is the status code answered for d (default 200).
	Status func(d *Delivery) int
	// RetryAfter, when set, is the Retry-After the sink answers d with,
	// in whole seconds, when it does not answer 2xx; 0 sends none.
	RetryAfter func(d *Delivery) int

	srv *httptest.Server

	mu         sync.Mutex
	deliveries []Delivery
	acked      map[TP]map[int64]int
	inFlight   int
	inFlightBy map[string]int
	// requests are the records of every request received, answered or
	// abandoned by its sender (Status 0), for the overlap check.
	requests [][]Delivery
	// origin resolves a new connection's sender; origins holds the answer
	// per open connection, by remote address.
	origin  func(client, server net.Addr) string
	origins map[string]string
}

// StartSink starts a sink on a loopback port, closed with the test.
func StartSink(t testing.TB) *Sink {
	s := &Sink{acked: make(map[TP]map[int64]int), origins: make(map[string]string), inFlightBy: make(map[string]int)}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.srv.Config.ConnState = s.connState
	s.srv.Start()
	s.URL = s.srv.URL + "/hook"
	t.Cleanup(s.srv.Close)
	return s
}

// SetOrigin makes the sink ask origin, for every connection it accepts
// from then on, which process opened it; each delivery then names it
// (Delivery.Origin), and the overlap check can tell the requests of a
// process that died from the others. origin runs on the accept loop, while
// the sender's socket still exists.
func (s *Sink) SetOrigin(origin func(client, server net.Addr) string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.origin = origin
}

func (s *Sink) connState(c net.Conn, state http.ConnState) {
	switch state {
	case http.StateNew:
		s.mu.Lock()
		origin := s.origin
		s.mu.Unlock()
		if origin == nil {
			return
		}
		name := origin(c.RemoteAddr(), c.LocalAddr())
		s.mu.Lock()
		s.origins[c.RemoteAddr().String()] = name
		s.mu.Unlock()
	case http.StateClosed, http.StateHijacked:
		// The client's port may be reused by another process.
		s.mu.Lock()
		delete(s.origins, c.RemoteAddr().String())
		s.mu.Unlock()
	}
}

func (s *Sink) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	start := time.Now()
	var ds []*Delivery
	if r.Header.Get("Keyhook-Offset") == "" && bytes.HasPrefix(body, []byte(`{"deliveries"`)) {
		ds = batchDeliveries(r, body, start)
	} else {
		p, _ := strconv.ParseInt(r.Header.Get("Keyhook-Partition"), 10, 32)
		off, _ := strconv.ParseInt(r.Header.Get("Keyhook-Offset"), 10, 64)
		attempt, _ := strconv.Atoi(r.Header.Get("Keyhook-Attempt"))
		ds = []*Delivery{{
			Topic: r.Header.Get("Keyhook-Topic"), Partition: int32(p), Offset: off,
			Key: r.Header.Get("Keyhook-Key"), ID: r.Header.Get("Webhook-Id"), Attempt: attempt,
			Start: start, Body: body, Header: r.Header.Clone(),
		}}
	}
	if len(ds) == 0 {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	// A batch is answered as a whole, by what its first record asks for.
	d := ds[0]
	s.mu.Lock()
	s.inFlight++
	for _, d := range ds {
		d.Origin = s.origins[r.RemoteAddr]
	}
	s.inFlightBy[d.Origin]++
	s.mu.Unlock()
	if s.Latency != nil {
		if l := s.Latency(d); l > 0 {
			select {
			case <-time.After(l):
			case <-r.Context().Done():
			}
		}
	}
	status := http.StatusOK
	if s.Status != nil {
		status = s.Status(d)
	}
	end := time.Now()
	s.mu.Lock()
	s.inFlight--
	s.inFlightBy[d.Origin]--
	// An abandoned request (its sender gone or timed out) ends when the
	// sink noticed; it is kept for the overlap check only.
	req := make([]Delivery, len(ds))
	for i, d := range ds {
		req[i] = *d
		req[i].End = end
		if r.Context().Err() == nil {
			req[i].Status = status
		}
	}
	s.requests = append(s.requests, req)
	if r.Context().Err() == nil {
		for _, d := range ds {
			d.Status, d.End = status, end
			s.deliveries = append(s.deliveries, *d)
			if d.Status >= 200 && d.Status < 300 {
				tp := TP{d.Topic, d.Partition}
				if s.acked[tp] == nil {
					s.acked[tp] = make(map[int64]int)
				}
				s.acked[tp][d.Offset]++
			}
		}
	}
	s.mu.Unlock()
	if s.RetryAfter != nil && status/100 != 2 {
		if secs := s.RetryAfter(d); secs > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(secs))
		}
	}
	w.WriteHeader(status)
}

// batchDeliveries reads a batch request (webhooks.Batch) as one delivery
// per record, in the batch's order, with the body each record's own
// request would have had.
func batchDeliveries(r *http.Request, body []byte, start time.Time) []*Delivery {
	var b struct {
		Deliveries []struct {
			ID          string            `json:"id"`
			Key         *string           `json:"key"`
			Value       json.RawMessage   `json:"value"`
			ValueBase64 string            `json:"value_base64"`
			Attributes  map[string]string `json:"attributes"`
		} `json:"deliveries"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return nil
	}
	attempt, _ := strconv.Atoi(r.Header.Get("Keyhook-Attempt"))
	batch := r.Header.Get("Webhook-Id")
	out := make([]*Delivery, 0, len(b.Deliveries))
	for _, e := range b.Deliveries {
		p, _ := strconv.ParseInt(e.Attributes["partition"], 10, 32)
		off, _ := strconv.ParseInt(e.Attributes["offset"], 10, 64)
		d := &Delivery{
			Topic: e.Attributes["topic"], Partition: int32(p), Offset: off,
			ID: e.ID, Attempt: attempt, Start: start, Header: r.Header.Clone(), Batch: batch,
		}
		if e.Key != nil {
			d.Key = *e.Key
		}
		// The envelope carries a text value as a JSON string, JSON as is,
		// and anything else in base64.
		var text string
		switch {
		case e.ValueBase64 != "":
			d.Body, _ = base64.StdEncoding.DecodeString(e.ValueBase64)
		case json.Unmarshal(e.Value, &text) == nil:
			d.Body = []byte(text)
		default:
			d.Body = e.Value
		}
		out = append(out, d)
	}
	return out
}

// Deliveries returns a copy of every answered request, in answer order.
func (s *Sink) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Delivery(nil), s.deliveries...)
}

// Acked reports whether the sink answered 2xx for the offset.
func (s *Sink) Acked(tp TP, offset int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acked[tp][offset] > 0
}

// AckedCount is the number of distinct records answered 2xx.
func (s *Sink) AckedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, m := range s.acked {
		n += len(m)
	}
	return n
}

// Duplicates counts 2xx answers beyond the first for each record.
func (s *Sink) Duplicates() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, m := range s.acked {
		for _, c := range m {
			n += c - 1
		}
	}
	return n
}

// InFlight is the number of requests being answered right now.
func (s *Sink) InFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight
}

// InFlightFrom is the number of requests of origin (Delivery.Origin)
// being answered right now.
func (s *Sink) InFlightFrom(origin string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlightBy[origin]
}

// CompletedSince counts requests answered at or after t.
func (s *Sink) CompletedSince(t time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for i := len(s.deliveries) - 1; i >= 0 && !s.deliveries[i].End.Before(t); i-- {
		n++
	}
	return n
}

// WaitAcked waits until n distinct records were answered 2xx.
func (s *Sink) WaitAcked(t testing.TB, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if s.AckedCount() >= n {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("sink: %d of %d records acked after %v", s.AckedCount(), n, timeout)
}

// KeyOrderViolations checks per-key order over first deliveries: for every
// key and partition, the first 2xx of each record must come in offset
// order, and each must have been sent only after the previous one was
// answered (records of one batch are sent together, in offset order). It
// returns a description of each violation.
func (s *Sink) KeyOrderViolations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	type lk struct {
		tp  TP
		key string
	}
	last := make(map[lk]int64)
	lastEnd := make(map[lk]time.Time)
	lastBatch := make(map[lk]string)
	seen := make(map[TP]map[int64]bool)
	var out []string
	for _, d := range s.deliveries {
		if d.Status < 200 || d.Status >= 300 {
			continue
		}
		tp := TP{d.Topic, d.Partition}
		if seen[tp] == nil {
			seen[tp] = make(map[int64]bool)
		}
		if seen[tp][d.Offset] {
			continue // a redelivery; order is judged on first deliveries
		}
		seen[tp][d.Offset] = true
		k := lk{tp, d.Key}
		if prev, ok := last[k]; ok {
			if d.Offset < prev {
				out = append(out, fmt.Sprintf("%s/%d key %q: offset %d delivered after %d", d.Topic, d.Partition, d.Key, d.Offset, prev))
			} else if d.Start.Before(lastEnd[k]) && (d.Batch == "" || d.Batch != lastBatch[k]) {
				out = append(out, fmt.Sprintf("%s/%d key %q: offset %d sent before %d was acked", d.Topic, d.Partition, d.Key, d.Offset, prev))
			}
		}
		last[k] = d.Offset
		lastEnd[k] = d.End
		lastBatch[k] = d.Batch
	}
	sort.Strings(out)
	return out
}

// Missing lists offsets in [0, end) of tp that were never answered 2xx.
func (s *Sink) Missing(tp TP, end int64) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int64
	for o := int64(0); o < end; o++ {
		if s.acked[tp][o] == 0 {
			out = append(out, o)
		}
	}
	return out
}

// Overlap is a request that reached the sink while an earlier request
// carrying a record of the same key and partition was still unanswered:
// two deliveries of one key in flight at once, which per-key order rules
// out unless the earlier sender failed (a zombie's late request, or one a
// dead node left behind).
type Overlap struct {
	TP  TP
	Key string
	// Earlier is the record of the request still in flight, Later the one
	// that arrived meanwhile; Status is 0 for a request abandoned by its
	// sender, and End is when the sink noticed.
	Earlier, Later Delivery
}

func (o Overlap) String() string {
	return fmt.Sprintf("%s/%d key %q: offset %d from %q sent at %s while offset %d from %q was in flight (%s to %s)",
		o.TP.Topic, o.TP.Partition, o.Key, o.Later.Offset, o.Later.Origin, o.Later.Start.Format("15:04:05.000"),
		o.Earlier.Offset, o.Earlier.Origin, o.Earlier.Start.Format("15:04:05.000"), o.Earlier.End.Format("15:04:05.000"))
}

// KeyOverlaps returns, over every request the sink received (answered or
// abandoned, whatever its status, across every sender), each request that
// arrived while an earlier one of the same key and partition was in
// flight. Records of one key in one batch request are no overlap. Only
// meaningful for orderings key and partition: ordering none sends a key's
// records concurrently on purpose.
func (s *Sink) KeyOverlaps() []Overlap {
	s.mu.Lock()
	defer s.mu.Unlock()
	type lk struct {
		tp  TP
		key string
	}
	type visit struct {
		d   Delivery
		req int
	}
	byKey := make(map[lk][]visit)
	for i, r := range s.requests {
		for _, d := range r {
			k := lk{TP{d.Topic, d.Partition}, d.Key}
			byKey[k] = append(byKey[k], visit{d, i})
		}
	}
	var out []Overlap
	for k, vs := range byKey {
		sort.SliceStable(vs, func(i, j int) bool { return vs[i].d.Start.Before(vs[j].d.Start) })
		// open is the request of the key that ends last among those
		// started so far.
		open := -1
		for i, v := range vs {
			if open >= 0 && vs[open].req != v.req && v.d.Start.Before(vs[open].d.End) {
				out = append(out, Overlap{TP: k.tp, Key: k.key, Earlier: vs[open].d, Later: v.d})
			}
			if open < 0 || v.d.End.After(vs[open].d.End) {
				open = i
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Later.Start.Before(out[j].Later.Start) })
	return out
}
