package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"sync/atomic"
	"time"
)

// Latency distributions of the sink.
const (
	distFixed     = "fixed"
	distUniform   = "uniform"
	distLognormal = "lognormal"
)

// latencySpec is how long the sink takes to answer a request.
type latencySpec struct {
	// Dist is fixed, uniform or lognormal.
	Dist string `json:"dist"`
	// Center is the fixed value, the uniform mean or the lognormal median.
	Center time.Duration `json:"center"`
	// Spread is the uniform half-width.
	Spread time.Duration `json:"spread,omitempty"`
	// Sigma is the lognormal shape.
	Sigma float64 `json:"sigma,omitempty"`
}

func (l latencySpec) draw() time.Duration {
	switch l.Dist {
	case distUniform:
		lo := l.Center - l.Spread
		return max(0, lo+time.Duration(rand.Int64N(int64(2*l.Spread)+1)))
	case distLognormal:
		return time.Duration(float64(l.Center) * math.Exp(l.Sigma*rand.NormFloat64()))
	default:
		return l.Center
	}
}

// p99 is the distribution's 99th percentile.
func (l latencySpec) p99() time.Duration {
	switch l.Dist {
	case distUniform:
		return max(0, l.Center-l.Spread) + time.Duration(0.99*float64(2*l.Spread))
	case distLognormal:
		return time.Duration(float64(l.Center) * math.Exp(2.3263*l.Sigma))
	default:
		return l.Center
	}
}

// mean is the distribution's mean.
func (l latencySpec) mean() time.Duration {
	if l.Dist == distLognormal {
		return time.Duration(float64(l.Center) * math.Exp(l.Sigma*l.Sigma/2))
	}
	return l.Center
}

func (l latencySpec) String() string {
	switch l.Dist {
	case distUniform:
		return fmt.Sprintf("uniform %v±%v", l.Center, l.Spread)
	case distLognormal:
		return fmt.Sprintf("lognormal median %v σ %.2g", l.Center, l.Sigma)
	default:
		return fmt.Sprintf("%v", l.Center)
	}
}

// sinkSpec is the endpoint's behaviour in a scenario.
type sinkSpec struct {
	Latency latencySpec `json:"latency"`
	// ErrorRate is the share of attempts answered 503.
	ErrorRate float64 `json:"error_rate,omitempty"`
	// SlowLatency is the latency of the special key when it is slow.
	SlowLatency time.Duration `json:"slow_latency,omitempty"`
	// FailRecord, when not negative, is a record answered 503 until
	// FailFor has passed since its first attempt.
	FailRecord int           `json:"fail_record"`
	FailFor    time.Duration `json:"fail_for,omitempty"`
}

// sink is the HTTP endpoint every contender posts to. It keeps, per
// record, the time of the first 2xx and the end-to-end latency from the
// record's timestamp, and checks per-key order.
type sink struct {
	url string
	srv *http.Server
	run atomic.Pointer[sinkRun]
}

// sinkRun is the state of one contender's run.
type sinkRun struct {
	data *dataset
	spec sinkSpec
	// keyOrder: requests of one key must not overlap and must come in
	// sequence order (checked, and counted as violations, only when set).
	keyOrder bool

	firstOK []atomic.Int64 // unix ns of the first 2xx, 0 none
	e2e     []atomic.Int64 // ns from the record timestamp to the first 2xx
	// service is the sink's own time on the attempt answered 2xx, from
	// reading the request to answering: the endpoint latency as realised
	// on this machine.
	service []atomic.Int64
	okCount []atomic.Int32
	keyBusy []atomic.Int32
	keyLast []atomic.Int64 // highest sequence answered 2xx per key, -1 none
	failAt  atomic.Int64   // first attempt of FailRecord, unix ns
	// failUntil is when the failing special key recovers, unix ns.
	failUntil atomic.Int64

	delivered atomic.Int64 // distinct records answered 2xx
	others    atomic.Int64 // of them, records of ordinary keys
	requests  atomic.Int64
	errors    atomic.Int64 // attempts answered 503
	overlaps  atomic.Int64 // a key's request arrived while another was open
	reorders  atomic.Int64 // a key's record answered after a later one
	bad       atomic.Int64 // requests whose body is not a bench record
}

func newSinkRun(d *dataset, spec sinkSpec, keyOrder bool) *sinkRun {
	r := &sinkRun{
		data: d, spec: spec, keyOrder: keyOrder,
		firstOK: make([]atomic.Int64, d.spec.Records),
		e2e:     make([]atomic.Int64, d.spec.Records),
		service: make([]atomic.Int64, d.spec.Records),
		okCount: make([]atomic.Int32, d.spec.Records),
		keyBusy: make([]atomic.Int32, d.spec.Keys+1),
		keyLast: make([]atomic.Int64, d.spec.Keys+1),
	}
	for i := range r.keyLast {
		r.keyLast[i].Store(-1)
	}
	return r
}

// startSink serves on a loopback port until ctx ends.
func startSink(ctx context.Context) (*sink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: sink: %w", err)
	}
	s := &sink{url: "http://" + ln.Addr().String() + "/hook"}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(os.Stderr, "bench: sink stopped: %v\n", err)
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.srv.Shutdown(sctx)
	}()
	return s, nil
}

// begin starts recording a new run; requests before it are refused.
func (s *sink) begin(r *sinkRun) { s.run.Store(r) }

// end stops recording; later requests are refused.
func (s *sink) end() { s.run.Store(nil) }

func (s *sink) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	arrived := time.Now().UnixNano()
	run := s.run.Load()
	if run == nil || err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	// A record's request carries one record, a batch's several: both are
	// answered alike.
	var one [1]bodyInfo
	var infos []bodyInfo
	if req.Header.Get("Content-Type") == batchContentType {
		infos, err = parseBatch(body)
	} else {
		one[0], err = parseBody(body)
		infos = one[:]
	}
	if err == nil && slices.ContainsFunc(infos, func(info bodyInfo) bool {
		return int(info.id) >= len(run.firstOK) || int(info.key) >= len(run.keyBusy)
	}) {
		err = errBadBody
	}
	if err != nil {
		run.bad.Add(1)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	run.requests.Add(1)
	// A key is busy once per request, however many of its records a batch
	// carries (in sequence order, which ok checks).
	var oneKey [1]uint32
	keys := oneKey[:0]
	for _, info := range infos {
		if !slices.Contains(keys, info.key) {
			keys = append(keys, info.key)
		}
	}
	for _, k := range keys {
		if run.keyBusy[k].Add(1) > 1 && run.keyOrder {
			run.overlaps.Add(1)
		}
	}
	lat := run.spec.Latency.draw()
	if slices.Contains(keys, 0) && run.data.spec.Special == specialSlow {
		lat = run.spec.SlowLatency
	}
	if lat > 0 {
		t := time.NewTimer(lat)
		select {
		case <-t.C:
		case <-req.Context().Done():
			t.Stop()
		}
	}
	// The request fails when any of its records is to fail; the error
	// rate applies to requests carrying no record that fails on purpose.
	status := http.StatusNoContent
	now := time.Now().UnixNano()
	special := false
	for _, info := range infos {
		switch {
		case int(info.id) == run.spec.FailRecord:
			special = true
			run.failAt.CompareAndSwap(0, now)
			if now < run.failAt.Load()+int64(run.spec.FailFor) {
				status = http.StatusServiceUnavailable
			}
		case info.key == 0 && run.data.spec.Special == specialFailing && now < run.failUntil.Load():
			special = true
			status = http.StatusServiceUnavailable
		}
	}
	if !special && run.spec.ErrorRate > 0 && rand.Float64() < run.spec.ErrorRate {
		status = http.StatusServiceUnavailable
	}
	if status == http.StatusNoContent && req.Context().Err() == nil {
		for _, info := range infos {
			run.ok(info, arrived, now)
		}
	} else if status != http.StatusNoContent {
		run.errors.Add(1)
	}
	// The key is free before the answer leaves: the contender may send the
	// key's next record the moment it reads the answer.
	for _, k := range keys {
		run.keyBusy[k].Add(-1)
	}
	w.WriteHeader(status)
}

// ok records a 2xx answer, before it is sent: whatever a contender
// believes delivered, the sink has recorded.
func (r *sinkRun) ok(info bodyInfo, arrived, now int64) {
	if r.okCount[info.id].Add(1) != 1 {
		return // a redelivery
	}
	r.service[info.id].Store(now - arrived)
	r.firstOK[info.id].Store(now)
	r.e2e[info.id].Store(now - info.ts)
	r.delivered.Add(1)
	if info.key != 0 || r.data.spec.Special == specialNone {
		r.others.Add(1)
	}
	if !r.keyOrder {
		return
	}
	last := &r.keyLast[info.key]
	for {
		cur := last.Load()
		if int64(info.seq) < cur {
			r.reorders.Add(1)
			return
		}
		if last.CompareAndSwap(cur, int64(info.seq)) {
			return
		}
	}
}

// duplicates counts 2xx answers beyond the first per record.
func (r *sinkRun) duplicates() int64 {
	var n int64
	for i := range r.okCount {
		if c := r.okCount[i].Load(); c > 1 {
			n += int64(c - 1)
		}
	}
	return n
}

// batchContentType is the Content-Type of keyhook's batch requests.
const batchContentType = "application/json"

// parseBatch reads the records of a keyhook batch request,
// {"deliveries": [<envelope>, ...]}, each record's value in the
// envelope's value_base64 (bench values are not JSON).
func parseBatch(body []byte) ([]bodyInfo, error) {
	var b struct {
		Deliveries []struct {
			ValueBase64 []byte `json:"value_base64"`
		} `json:"deliveries"`
	}
	if err := json.Unmarshal(body, &b); err != nil || len(b.Deliveries) == 0 {
		return nil, errBadBody
	}
	infos := make([]bodyInfo, len(b.Deliveries))
	for i, d := range b.Deliveries {
		info, err := parseBody(d.ValueBase64)
		if err != nil {
			return nil, err
		}
		infos[i] = info
	}
	return infos, nil
}
