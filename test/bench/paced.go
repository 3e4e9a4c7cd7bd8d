package main

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// pacedResult is keyhook's latency with records produced at a steady
// rate, half of what it reached when draining scenario 1.
type pacedResult struct {
	Rate      float64 `json:"target_records_per_s"`
	Achieved  float64 `json:"produced_records_per_s"`
	Duration  float64 `json:"duration_s"`
	Records   int     `json:"records"`
	Delivered int64   `json:"delivered"`
	Measured  int     `json:"measured"`
	P50       float64 `json:"e2e_p50_ms"`
	P99       float64 `json:"e2e_p99_ms"`
	P999      float64 `json:"e2e_p999_ms"`
	// KeyFreeP50/P99 measure from when the record could be sent at all:
	// its timestamp, or the 2xx of the previous record of its key if that
	// came later (ordering key holds it back until then).
	KeyFreeP50 float64 `json:"key_free_p50_ms"`
	KeyFreeP99 float64 `json:"key_free_p99_ms"`
	// Waited counts measured records whose key was still busy with the
	// previous record when they were produced.
	Waited        int   `json:"waited_for_key"`
	AttemptErrors int64 `json:"attempt_errors"`
	MaxWindow     int64 `json:"max_window"`
	PausedMax     int64 `json:"paused_max"`
	// OthersCPU is the share of the CPUs other processes used meanwhile.
	OthersCPU float64 `json:"others_cpu_share"`
	// EndpointP99 is the p99 of the sink's latency distribution;
	// ServiceP99 the p99 the sink actually took, on this loaded machine.
	EndpointP99 float64 `json:"endpoint_p99_ms"`
	ServiceP99  float64 `json:"service_p99_ms"`
	// ToSinkP50/P99 measure from the record's timestamp (or its key
	// becoming free) to the sink reading the request: Kafka, keyhook's
	// dispatch and the client, without the endpoint's own time.
	ToSinkP50 float64 `json:"to_sink_p50_ms"`
	ToSinkP99 float64 `json:"to_sink_p99_ms"`
	// ToSinkFreshP99 is ToSinkP99 of the records whose key was free when
	// they were produced, ToSinkWaitedP99 of those that waited for the
	// previous record of their key: the first is Kafka and keyhook's
	// dispatch, the second keyhook's turnaround from a 2xx to the key's
	// next request.
	ToSinkFreshP99  float64 `json:"to_sink_fresh_p99_ms"`
	ToSinkWaitedP99 float64 `json:"to_sink_waited_p99_ms"`
	// ProduceAckP50/P99 measure from the record's timestamp to the
	// producer's acknowledgement: the part of the latency spent before the
	// broker had the record (the producer and the broker's append), which
	// no consumer can make up.
	ProduceAckP50 float64 `json:"produce_ack_p50_ms"`
	ProduceAckP99 float64 `json:"produce_ack_p99_ms"`
	// KafkaP50/P99 measure from the record's timestamp to a plain consumer
	// of the same topic polling it, meanwhile (kafkaOnly): Kafka's own
	// share of the latency on this machine under this load.
	KafkaP50 float64 `json:"kafka_only_p50_ms"`
	KafkaP99 float64 `json:"kafka_only_p99_ms"`
	// WorstPerSecond is the largest e2e latency, in ms, of the records
	// produced in each second of the run: where a tail comes from.
	WorstPerSecond []float64 `json:"worst_per_second_ms"`
	Notes          []string  `json:"notes,omitempty"`
}

// runPaced produces records at rate for d while a keyhook (ordering key)
// contender runs on scenario sc's endpoint, and measures the end-to-end
// latency of the records produced after warmup.
func (h *harness) runPaced(ctx context.Context, sc scenario, rate float64, d, warmup time.Duration) (*pacedResult, error) {
	res := &pacedResult{Rate: rate, Duration: d.Seconds(), EndpointP99: float64(sc.Sink.Latency.p99()) / 1e6}
	n := int(rate * d.Seconds())
	if n < 1 {
		return nil, fmt.Errorf("bench: paced run: rate %.0f/s gives no record", rate)
	}
	sc.ID = "1p"
	sc.Data.Records = n
	res.Records = n
	data := newDataset(sc.Data)
	topic := fmt.Sprintf("bench-s1p-%d", time.Now().UnixNano())
	if err := h.kafka.createTopic(ctx, topic, sc.Partitions); err != nil {
		return nil, err
	}
	run := newSinkRun(data, sc.Sink, true)
	h.sink.begin(run)
	defer h.sink.end()
	spec := h.childSpecFor(sc, topic, cKey)
	cpuBefore := takeCPUSnapshot(h.redis.cmd.Process.Pid)
	ch, err := startChild(spec, h.logw)
	if err != nil {
		return nil, err
	}
	select {
	case <-ch.ready:
	case <-time.After(60 * time.Second):
		_, _ = ch.stop(10 * time.Second)
		return nil, fmt.Errorf("bench: paced run: keyhook did not own its partitions within 60s")
	}
	ko, err := startKafkaOnly(ctx, h.kafka.brokers, topic, sc.Partitions, n)
	if err != nil {
		_, _ = ch.stop(10 * time.Second)
		return nil, err
	}
	defer ko.stop()
	// Let the claims land before the clock starts.
	time.Sleep(500 * time.Millisecond)

	p, err := newProducer(h.kafka.brokers, topic, data, time.Millisecond)
	if err != nil {
		_, _ = ch.stop(10 * time.Second)
		return nil, err
	}
	p.trackAcks(n)
	res.Achieved = float64(n) / p.produceAtRate(ctx, n, rate).Seconds()
	if err := p.finish(ctx); err != nil {
		_, _ = ch.stop(10 * time.Second)
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for run.delivered.Load() < int64(n) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	res.Delivered = run.delivered.Load()
	rep, err := ch.stop(30 * time.Second)
	res.OthersCPU = othersShare(cpuBefore, takeCPUSnapshot(h.redis.cmd.Process.Pid))
	if err != nil {
		res.Notes = append(res.Notes, "child: "+err.Error())
	}
	for _, s := range rep.Samples {
		res.AttemptErrors = max(res.AttemptErrors, s.AttemptErrors)
		res.MaxWindow = max(res.MaxWindow, s.MaxDistance)
		res.PausedMax = max(res.PausedMax, s.Paused)
	}
	if res.Delivered < int64(n) {
		res.Notes = append(res.Notes, fmt.Sprintf("only %d of %d records delivered within 30 s of the last produce", res.Delivered, n))
	}
	perSecond := max(1, int(rate))
	for i := 0; i < n; i += perSecond {
		worst := 0.0
		for j := i; j < min(n, i+perSecond); j++ {
			if run.firstOK[j].Load() > 0 {
				worst = max(worst, float64(run.e2e[j].Load())/1e6)
			}
		}
		res.WorstPerSecond = append(res.WorstPerSecond, worst)
	}
	skip := int(rate * warmup.Seconds())
	var lat, free, svc, toSink, fresh, waited, acks []int64
	for i := skip; i < n; i++ {
		if a := p.acked[i].Load(); a > 0 {
			acks = append(acks, a)
		}
		ok := run.firstOK[i].Load()
		if ok == 0 {
			continue
		}
		e2e := run.e2e[i].Load()
		lat = append(lat, e2e)
		ready := ok - e2e // the record's timestamp
		wait := false
		if p := data.prev[i]; p >= 0 {
			if prevOK := run.firstOK[p].Load(); prevOK > ready {
				ready = prevOK
				wait = true
				res.Waited++
			}
		}
		free = append(free, ok-ready)
		sv := run.service[i].Load()
		svc = append(svc, sv)
		toSink = append(toSink, ok-sv-ready)
		if wait {
			waited = append(waited, ok-sv-ready)
		} else {
			fresh = append(fresh, ok-sv-ready)
		}
	}
	res.Measured = len(lat)
	res.P50, res.P99, res.P999 = notMeasured, notMeasured, notMeasured
	res.KeyFreeP50, res.KeyFreeP99 = notMeasured, notMeasured
	res.ServiceP99, res.ToSinkP50, res.ToSinkP99 = notMeasured, notMeasured, notMeasured
	res.ToSinkFreshP99, res.ToSinkWaitedP99 = notMeasured, notMeasured
	res.ProduceAckP50, res.ProduceAckP99 = notMeasured, notMeasured
	res.KafkaP50, res.KafkaP99 = ko.percentiles(skip)
	if len(acks) > 0 {
		slices.Sort(acks)
		res.ProduceAckP50 = float64(percentile(acks, 0.50)) / 1e6
		res.ProduceAckP99 = float64(percentile(acks, 0.99)) / 1e6
	}
	if len(lat) > 0 {
		for _, v := range [][]int64{lat, free, svc, toSink, fresh, waited} {
			slices.Sort(v)
		}
		if len(fresh) > 0 {
			res.ToSinkFreshP99 = float64(percentile(fresh, 0.99)) / 1e6
		}
		if len(waited) > 0 {
			res.ToSinkWaitedP99 = float64(percentile(waited, 0.99)) / 1e6
		}
		res.ServiceP99 = float64(percentile(svc, 0.99)) / 1e6
		res.ToSinkP50 = float64(percentile(toSink, 0.50)) / 1e6
		res.ToSinkP99 = float64(percentile(toSink, 0.99)) / 1e6
		res.P50 = float64(percentile(lat, 0.50)) / 1e6
		res.P99 = float64(percentile(lat, 0.99)) / 1e6
		res.P999 = float64(percentile(lat, 0.999)) / 1e6
		res.KeyFreeP50 = float64(percentile(free, 0.50)) / 1e6
		res.KeyFreeP99 = float64(percentile(free, 0.99)) / 1e6
	}
	res.Notes = append(res.Notes, fmt.Sprintf("the first %v of records (%d) are warm-up and not measured; "+
		"the producer lingers up to 1 ms, included in the latency", warmup, skip))
	return res, nil
}
