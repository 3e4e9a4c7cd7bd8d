package main

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary stand in for the bench binary when the
// harness re-executes itself as a contender.
func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(childMain(spec))
	}
	os.Exit(m.Run())
}

// testWriter sends the harness's progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestQuickRunDeliversEveryRecordAndWritesResults runs the -quick
// variant of scenarios 1 and 3 with a handful of records: every contender
// that is not capped delivers every record, the key-ordered ones in order,
// every number is finite, and the three result files are written. It
// asserts nothing about speed.
func TestQuickRunDeliversEveryRecordAndWritesResults(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server, Kafka and a child process per contender")
	}
	out := t.TempDir()
	opts := options{scenarios: []string{"1", "3"}, quick: true, records: 400, out: out, latency: distFixed}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := run(ctx, opts, "go test ./bench", testWriter{t})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if got := len(res.Scenarios); got != 2 {
		t.Fatalf("scenarios run: got %d, want 2", got)
	}
	for _, s := range res.Scenarios {
		if got, want := len(s.Runs), len(s.Scenario.Contenders); got != want {
			t.Errorf("scenario %s: %d runs, want %d", s.ID, got, want)
		}
		if got := s.run(cKeyBatch.Name) != nil; got != (s.ID == "3") {
			t.Errorf("scenario %s: a run of %s: %v, want it in scenario 3 alone", s.ID, cKeyBatch.Name, got)
		}
		for _, r := range s.Runs {
			name := "scenario " + s.ID + ", " + r.Contender.Name
			if r.Outcome == outcomeSkipped {
				t.Logf("%s: %s", name, r.Notes[0])
				continue
			}
			switch {
			case r.Contender.Serial && r.Outcome == outcomeCapped:
				if r.Delivered == 0 {
					t.Errorf("%s: capped without delivering anything", name)
				}
			case r.Outcome != outcomeComplete || r.Delivered != int64(r.Records):
				t.Errorf("%s: %s with %d of %d records delivered, want all", name, r.Outcome, r.Delivered, r.Records)
			}
			if r.Overlaps != 0 || r.Reorders != 0 {
				t.Errorf("%s: per-key order broken: %d overlapping requests, %d out of order", name, r.Overlaps, r.Reorders)
			}
			if r.Duplicates != 0 && r.Contender.Mode != modeWrk { // wrk cannot stop at the last body
				t.Errorf("%s: %d duplicate deliveries without any failure", name, r.Duplicates)
			}
			for field, v := range map[string]float64{
				"records/s": r.Rate, "window": r.Window, "CPU/record": r.CPUPerRecordUS,
				"e2e p50": r.E2EP50, "e2e p99": r.E2EP99, "Redis commands/record": r.CmdsPerRecord, "Redis sent/record": r.SentPerRecord,
				"heap/pending": r.HeapPerHeld, "peak RSS": r.PeakRSSMB,
			} {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					t.Errorf("%s: %s is %v", name, field, v)
				}
			}
			if r.Rate <= 0 {
				t.Errorf("%s: records/s %v, want > 0", name, r.Rate)
			}
			if r.CPUPerRecordUS <= 0 {
				t.Errorf("%s: CPU/record %v, want > 0", name, r.CPUPerRecordUS)
			}
			if r.Contender.Mode == modeKeyhook && r.CmdsPerRecord <= 0 {
				t.Errorf("%s: Redis commands/record %v, want > 0 (keyhook tracks in Redis)", name, r.CmdsPerRecord)
			}
			if r.Contender.Mode == modeKeyhook && r.SentPerRecord <= 0 {
				t.Errorf("%s: Redis sent/record %v, want > 0 (keyhook_redis_commands_total read)", name, r.SentPerRecord)
			}
		}
	}
	if res.Paced == nil || res.Paced.Delivered != int64(res.Paced.Records) {
		t.Errorf("paced run: %+v, want every record delivered", res.Paced)
	}
	if p := res.Paced; p != nil && (p.ToSinkFreshP99 <= 0 || p.ToSinkFreshP99 > p.ToSinkP99 && p.ToSinkWaitedP99 > p.ToSinkP99) {
		// The two splits' p99s cannot both exceed the p99 of their union.
		t.Errorf("paced run: to the sink p99 %v ms, of fresh keys %v, of waiting ones %v: want the split measured", p.ToSinkP99, p.ToSinkFreshP99, p.ToSinkWaitedP99)
	}
	if res.Paced != nil && (res.Paced.KafkaP50 <= 0 || res.Paced.KafkaP99 < res.Paced.KafkaP50) {
		t.Errorf("paced run: Kafka alone p50 %v, p99 %v ms, want the plain consumer's latency measured", res.Paced.KafkaP50, res.Paced.KafkaP99)
	}
	if len(res.Targets) == 0 {
		t.Error("no target was evaluated")
	}
	for _, f := range []string{"results.md", "results.json", "throughput.png"} {
		st, err := os.Stat(filepath.Join(out, f))
		if err != nil || st.Size() == 0 {
			t.Errorf("%s not written: %v", f, err)
		}
	}
}

// TestDatasetIsDeterministicAndKeepsPerKeyOrder defends what ceiling A and
// the sink rely on: the same spec yields the same records, sequences
// count each key's records in order, and bodies decode to what was
// encoded.
func TestDatasetIsDeterministicAndKeepsPerKeyOrder(t *testing.T) {
	spec := dataSpec{Records: 5000, Keys: 50, ValueBytes: 64, Special: specialHot, SpecialShare: 0.3, Seed: 7}
	a, b := newDataset(spec), newDataset(spec)
	next := make(map[uint32]uint32)
	for i := range spec.Records {
		if a.key[i] != b.key[i] || a.seq[i] != b.seq[i] {
			t.Fatalf("record %d differs between two datasets of one spec", i)
		}
		k := a.key[i]
		if a.seq[i] != next[k] {
			t.Fatalf("record %d of key %d has sequence %d, want %d", i, k, a.seq[i], next[k])
		}
		next[k]++
		ts := time.Unix(1700000000, int64(i))
		info, err := parseBody(a.body(i, ts))
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		want := bodyInfo{id: uint32(i), key: k, seq: a.seq[i], ts: ts.UnixNano()}
		if info != want {
			t.Fatalf("record %d decodes to %+v, want %+v", i, info, want)
		}
	}
	share := float64(a.specialRecords()) / float64(spec.Records)
	if share < 0.27 || share > 0.33 {
		t.Errorf("hot key carries %.2f of the records, want about 0.30", share)
	}
}

// TestKafkaFlagChoosesTheBroker: -kafka is auto by default and takes only
// auto, kfake or real.
func TestKafkaFlagChoosesTheBroker(t *testing.T) {
	var discard bytes.Buffer
	def, err := parseFlags(nil, &discard)
	if err != nil || def.kafka != kafkaAuto {
		t.Fatalf("default -kafka %q (%v), want auto", def.kafka, err)
	}
	for _, v := range []string{kafkaFake, kafkaReal} {
		if o, err := parseFlags([]string{"-kafka", v}, &discard); err != nil || o.kafka != v {
			t.Errorf("-kafka %s: %q, %v", v, o.kafka, err)
		}
	}
	if _, err := parseFlags([]string{"-kafka", "zookeeper"}, &discard); err == nil || !strings.Contains(discard.String(), "-kafka") {
		t.Errorf("-kafka zookeeper: %v, %q; want an error naming the flag", err, discard.String())
	}
}
