package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// contender is one way of moving the records to the endpoint.
type contender struct {
	Name     string `json:"name"`
	Mode     string `json:"mode"`
	Ordering string `json:"ordering,omitempty"`
	// Serial contenders deliver a partition one record at a time; at 50 ms
	// they would take hours to drain, so they run for SlowCap and their
	// rate is measured over that window.
	Serial bool `json:"serial,omitempty"`
	// Batch, above 1, has keyhook send up to that many records per request
	// (the subscription's batch.max_records).
	Batch int `json:"batch,omitempty"`
	// Shared runs keyhook with the shared read (--shared-read): the
	// subscription is a cursor over one reader of its topics.
	Shared bool `json:"shared,omitempty"`
}

// short is the contender's name in the -contenders flag.
func (c contender) short() string {
	switch c.Mode {
	case modeKeyhook:
		if c.Batch > 1 {
			return c.Ordering + "-batch"
		}
		if c.Shared {
			return c.Ordering + "-shared"
		}
		return c.Ordering
	default:
		return c.Mode
	}
}

var (
	cBaseline  = contender{Name: "baseline", Mode: modeBaseline, Serial: true}
	cKey       = contender{Name: "keyhook key", Mode: modeKeyhook, Ordering: "key"}
	cPartition = contender{Name: "keyhook partition", Mode: modeKeyhook, Ordering: "partition", Serial: true}
	cNone      = contender{Name: "keyhook none", Mode: modeKeyhook, Ordering: "none"}
	cCeilingA  = contender{Name: "ceiling A (HTTP only)", Mode: modeCeilingA}
	cCeilingB  = contender{Name: "ceiling B (Kafka only)", Mode: modeCeilingB}

	// cKeyBatch runs in scenario 3 only: at 0 ms it shows what a request
	// costs against what a record does.
	cKeyBatch = contender{Name: "keyhook key, batches of 10", Mode: modeKeyhook, Ordering: "key", Batch: 10}
	// cKeyShared runs in scenarios 1 and 3: keyhook key with the shared
	// read, against keyhook key with a consumer group of its own.
	cKeyShared = contender{Name: "keyhook key, shared read", Mode: modeKeyhook, Ordering: "key", Shared: true}

	// drainContenders run in every drain scenario; allContenders are
	// every contender of any scenario, in the chart's order.
	drainContenders = []contender{cBaseline, cKey, cPartition, cNone, cCeilingA, cCeilingB, cParallel, cWrk}
	allContenders   = append(slices.Clip(drainContenders), cKeyBatch, cKeyShared)
)

// scenario is one workload every contender runs on the same records.
type scenario struct {
	ID          string
	Title       string
	Partitions  int32
	Data        dataSpec
	Sink        sinkSpec
	MaxInFlight int
	// Cap bounds any run, from its first delivery; SlowCap bounds the runs
	// of serial contenders.
	Cap, SlowCap time.Duration
	Contenders   []contender
	// OthersDone ends a run once every record of the ordinary keys is
	// delivered: the special key's records would take far longer.
	OthersDone bool
	// Nodes, when set, makes the scenario a scaling one (sharing.go): its
	// one contender, keyhook key, runs once per node count, each node a
	// process of its own in one consumer group, on Data.Records records
	// per node.
	Nodes []int
	// Stuck, when set, makes the scenario a stuck-key one (stuck.go):
	// records produced at a steady rate while one key fails or is slow.
	Stuck *stuckSpec
	// Notes are printed under the scenario's table.
	Notes []string
}

// options are the harness's flags.
type options struct {
	scenarios []string
	// contenders, when not empty, keeps only these contenders (by short
	// name: baseline, key, partition, none, ceiling-a, ceiling-b, key-batch).
	contenders []string
	records    int
	out        string
	quick      bool
	latency    string
	errorRate  float64
	maxWindow  int64
	idleConns  int
	// flushInterval is keyhook's tracking flush interval, 0 its default.
	flushInterval time.Duration
	profile       bool
	// kafka is the -kafka choice (kafkaAuto, kafkaFake, kafkaReal).
	kafka string
	// stuck shapes scenario 7.
	stuck stuckSpec
}

// sizes are the record counts and time caps of a run size.
type sizes struct {
	s1, s2, s3, s4, s5 int
	// s6 is scenario 6's records per node; s6Cap bounds each of its runs.
	s6           int
	s6Cap        time.Duration
	cap, slowCap time.Duration
	s5Cap        time.Duration
	failFor      time.Duration
	paced        time.Duration
	warmup       time.Duration
}

var (
	fullSizes = sizes{
		s1: 200000, s2: 80000, s3: 300000, s4: 200000, s5: 100000,
		s6: 60000, s6Cap: 60 * time.Second,
		cap: 40 * time.Second, slowCap: 20 * time.Second,
		s5Cap: 100 * time.Second, failFor: 60 * time.Second,
		paced: 20 * time.Second, warmup: 2 * time.Second,
	}
	quickSizes = sizes{
		s1: 3000, s2: 3000, s3: 5000, s4: 3000, s5: 3000,
		s6: 3000, s6Cap: 20 * time.Second,
		cap: 10 * time.Second, slowCap: 2 * time.Second,
		s5Cap: 20 * time.Second, failFor: 5 * time.Second,
		paced: 4 * time.Second, warmup: time.Second,
	}
)

// baseLatency is the 50 ms endpoint of scenarios 1, 2, 4 and 5 in the
// distribution the -latency flag names.
func baseLatency(dist string) (latencySpec, error) {
	switch dist {
	case distFixed, "":
		return latencySpec{Dist: distFixed, Center: 50 * time.Millisecond}, nil
	case distUniform:
		return latencySpec{Dist: distUniform, Center: 50 * time.Millisecond, Spread: 25 * time.Millisecond}, nil
	case distLognormal:
		// Median 45 ms, σ 0.45: mean ≈ 50 ms, p99 ≈ 128 ms.
		return latencySpec{Dist: distLognormal, Center: 45 * time.Millisecond, Sigma: 0.45}, nil
	}
	return latencySpec{}, fmt.Errorf("bench: -latency %q: want fixed, uniform or lognormal", dist)
}

// buildScenarios returns the scenarios opts selects, in order.
func buildScenarios(opts options) ([]scenario, error) {
	sz := fullSizes
	if opts.quick {
		sz = quickSizes
	}
	lat, err := baseLatency(opts.latency)
	if err != nil {
		return nil, err
	}
	n := func(def int) int {
		if opts.records > 0 {
			return opts.records
		}
		return def
	}
	base := sinkSpec{Latency: lat, ErrorRate: opts.errorRate, FailRecord: -1}
	data := func(records int) dataSpec {
		return dataSpec{Records: records, Keys: 10000, ValueBytes: 256, Seed: 1}
	}
	var all []scenario
	s1 := scenario{
		ID: "1", Title: "8 partitions, 10,000 keys, endpoint " + lat.String() + ", max_in_flight 1,000",
		Partitions: 8, Data: data(n(sz.s1)), Sink: base, MaxInFlight: 1000,
		Cap: sz.cap, SlowCap: sz.slowCap, Contenders: append(slices.Clip(drainContenders), cKeyShared),
	}
	all = append(all, s1)

	s2a := s1
	s2a.ID, s2a.Title = "2a", "as 1, one slow key (1% of the records) answering in 1 s"
	s2a.Data = data(n(sz.s2))
	s2a.Data.Special, s2a.Data.SpecialShare = specialSlow, 0.01
	s2a.Sink.SlowLatency = time.Second
	s2a.OthersDone = true
	s2a.Contenders = drainContenders
	windowNote := "keyhook runs with its defaults: a window of 10,000 records in memory per partition and --park-after 16: " +
		"the %s key's records beyond 16 are parked by offset and read again from Kafka when it has room, so the other keys' " +
		"records are not held behind it (the \"other keys delivered\" column shows how many were still waiting when the run ended)."
	s2a.Notes = []string{fmt.Sprintf(windowNote, "slow")}
	all = append(all, s2a)

	s2b := s1
	s2b.ID, s2b.Title = "2b", "as 1, one hot key carrying 30% of the records"
	s2b.Data = data(n(sz.s2))
	s2b.Data.Special, s2b.Data.SpecialShare = specialHot, 0.30
	s2b.OthersDone = true
	s2b.Contenders = drainContenders
	s2b.Notes = []string{fmt.Sprintf(windowNote, "hot")}
	all = append(all, s2b)

	s3 := s1
	s3.ID, s3.Title = "3", "as 1, endpoint answering at once (0 ms): keyhook's own overhead"
	s3.Data = data(n(sz.s3))
	s3.Sink.Latency = latencySpec{Dist: distFixed}
	s3.Contenders = append(slices.Clip(drainContenders), cKeyBatch, cKeyShared)
	s3.Notes = []string{"keyhook key, batches of 10 sends up to 10 ready records per request (batch.max_records 10, max_wait_ms 0: a batch takes what is ready and waits for nothing), " +
		"each key's records in offset order within a batch, the records enveloped in JSON; what a request costs is shared by the records it carries, what a record costs is not. " +
		"The CPU target judges keyhook key, one record per request."}
	all = append(all, s3)

	s4 := s1
	s4.ID, s4.Title = "4", "1 partition, 10,000 keys, endpoint "+lat.String()+": too few partitions"
	s4.Partitions = 1
	s4.Data = data(n(sz.s4))
	s4.Contenders = drainContenders
	all = append(all, s4)

	s5 := s1
	s5.ID = "5"
	s5.Title = fmt.Sprintf("as 1, %d records, one record of one key answered 503 for %v", n(sz.s5), sz.failFor)
	s5.Data = data(n(sz.s5))
	s5.Sink.FailRecord = s5.Data.Records / 10
	s5.Sink.FailFor = sz.failFor
	s5.Cap = sz.s5Cap
	s5.Contenders = []contender{cBaseline, cKey, cCeilingB}
	s5.Notes = append(s5.Notes, "keyhook runs with its defaults (a window of 10,000 records in memory per partition, --park-after 16): "+
		"the failing record's key parks its later records by offset, so the other keys' records do not wait for the failure to end "+
		"(the second table counts any that did).", "Only baseline, keyhook key and ceiling B run here: the scenario is about the stalled watermark; "+
		"the other contenders' rates on this endpoint are in scenario 1.")
	all = append(all, s5)

	s6 := s1
	s6.ID = "6"
	s6.Title = "key-range sharing: 1 partition, 10,000 keys, endpoint " + lat.String() + ", max_in_flight 100 per node, 1 to 4 nodes"
	s6.Partitions = 1
	s6.MaxInFlight = 100
	s6.Data = data(n(sz.s6))
	s6.Nodes = []int{1, 2, 3, 4}
	s6.Cap = sz.s6Cap
	s6.Contenders = []contender{cKey}
	s6.Notes = []string{
		"Each node is a process of its own in the subscription's consumer group, with sharing auto (the default): beyond one node the partition is split by key hash, each node fetching the whole partition and delivering its ranges. " +
			"Each run preloads its records per node times the node count, starts every node at once, and measures from the moment every node's key hashes stopped changing (the group settled) to the last 2xx or the cap: the settled rate. " +
			"The rate over the whole run, group formation included, is the table's records/s.",
	}
	all = append(all, s6)

	s7 := s1
	s7.ID = "7"
	s7.Title = fmt.Sprintf("stuck key: 1 partition, 10,000 keys, endpoint %s, max_in_flight 1,000, %.0f rec/s offered; one key failing %v, one key at 1 s carrying %.0f%%",
		lat, opts.stuck.Rate, opts.stuck.Fail, 100*opts.stuck.SlowShare)
	s7.Partitions = 1
	s7.Data = data(0) // the records follow from the rate and the durations
	s7.Contenders = []contender{cKey}
	stuck := opts.stuck
	s7.Stuck = &stuck
	s7.Notes = []string{
		"keyhook key runs as a child process; records are produced at a steady rate, each stamped when produced. " +
			"Run a has no special key: its mean rate over the production windows is the no-failure rate. " +
			"Run b makes one key (its natural share of the records) answer 503 from the first record until the failure ends, production going on after it; " +
			"run c makes one key carrying a larger share answer every request in 1 s. " +
			"Each run then waits for the remaining records up to its drain cap.",
		"The ratio of a window is the other keys' delivered rate over run a's rate scaled by the share of records of the other keys in the run " +
			"(so a special key carrying 1% does not count as a 1% loss); only windows wholly within production have one.",
	}
	all = append(all, s7)

	var out []scenario
	for _, s := range all {
		if !selected(opts.scenarios, s.ID) {
			continue
		}
		if len(opts.contenders) > 0 {
			var keep []contender
			for _, c := range s.Contenders {
				if slices.Contains(opts.contenders, c.short()) {
					keep = append(keep, c)
				}
			}
			s.Contenders = keep
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("bench: -scenarios %q selects nothing (want some of 1,2,2a,2b,3,4,5,6,7)", strings.Join(opts.scenarios, ","))
	}
	return out, nil
}

// selected reports whether the -scenarios list names id ("2" names 2a
// and 2b).
func selected(list []string, id string) bool {
	return slices.Contains(list, id) || slices.Contains(list, strings.TrimRight(id, "ab"))
}
