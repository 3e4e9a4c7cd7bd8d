package main

import (
	"bytes"
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const sec = int64(time.Second)

// TestWindowsCountWhatFallsInEachTenSeconds: a stuck run's windows start
// at production's start; times before it or past the last window are
// left out, and rates are per second.
func TestWindowsCountWhatFallsInEachTenSeconds(t *testing.T) {
	start := 100 * sec
	times := []int64{99 * sec, 100 * sec, 105 * sec, 109*sec + 999, 110 * sec, 125 * sec, 130 * sec}
	if diff := cmp.Diff([]int64{3, 1, 1}, countWindows(times, start, 10*time.Second, 3)); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]float64{0.3, 0.1, 0.1}, rateWindows(times, start, 10*time.Second, 3)); diff != "" {
		t.Errorf("rates (-want +got):\n%s", diff)
	}
}

// TestWindowMaxKeepsTheLargestAndMarksEmptyWindows: RSS, parked and gaps
// are reported per window as their largest reading, n/a without one.
func TestWindowMaxKeepsTheLargestAndMarksEmptyWindows(t *testing.T) {
	ps := []point{{T: 0, V: 9}, {T: 1 * sec, V: 5}, {T: 4 * sec, V: 7}, {T: 25 * sec, V: 3}, {T: 40 * sec, V: 100}}
	got := windowMax(ps, 1*sec, 10*time.Second, 3)
	if diff := cmp.Diff([]int64{7, int64(notMeasured), 3}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestRatioIsToTheBaselineScaledByTheOtherKeysShare: a window's ratio
// compares the other keys' rate with run a's, scaled to the share of the
// records the other keys carry in this run; only windows wholly within
// production have one, and the lowest is the headline.
func TestRatioIsToTheBaselineScaledByTheOtherKeysShare(t *testing.T) {
	tests := []struct {
		name               string
		baseline, offered  float64
		share              float64
		rates              []float64
		producing          []bool
		wantRatios         []float64
		wantMin, wantMinAt float64
	}{
		{
			name: "a slow key with 1% of the records is not a 1% loss", baseline: 5000, offered: 5000, share: 0.99,
			rates: []float64{4950, 4950, 0}, producing: []bool{true, true, false},
			wantRatios: []float64{1, 1, notMeasured}, wantMin: 1, wantMinAt: 0,
		},
		{
			name: "the lowest window is the headline", baseline: 4000, offered: 5000, share: 1,
			rates: []float64{4000, 2000, 3800, 4000}, producing: []bool{true, true, true, false},
			wantRatios: []float64{1, 0.5, 0.95, notMeasured}, wantMin: 0.5, wantMinAt: 10,
		},
		{
			name: "without run a the offered rate stands in", baseline: 0, offered: 5000, share: 1,
			rates: []float64{2500}, producing: []bool{true},
			wantRatios: []float64{0.5}, wantMin: 0.5, wantMinAt: 0,
		},
		{
			name: "no window within production: no ratio", baseline: 5000, offered: 5000, share: 1,
			rates: []float64{100}, producing: []bool{false},
			wantRatios: []float64{notMeasured}, wantMin: notMeasured, wantMinAt: notMeasured,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &stuckRun{OthersShare: tt.share}
			for i, v := range tt.rates {
				r.Windows = append(r.Windows, stuckWindow{Start: float64(10 * i), OthersRate: v, Producing: tt.producing[i], Ratio: notMeasured})
			}
			r.rate(tt.baseline, tt.offered)
			var ratios []float64
			for _, w := range r.Windows {
				ratios = append(ratios, w.Ratio)
			}
			approx := cmp.Comparer(func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 })
			if diff := cmp.Diff(tt.wantRatios, ratios, approx); diff != "" {
				t.Errorf("ratios (-want +got):\n%s", diff)
			}
			if !cmp.Equal(tt.wantMin, r.MinRatio, approx) || r.MinRatioAt != tt.wantMinAt {
				t.Errorf("min ratio %v at %v s, want %v at %v s", r.MinRatio, r.MinRatioAt, tt.wantMin, tt.wantMinAt)
			}
		})
	}
}

// TestRSSGrowthIsTheLastProductionWindowOverTheWarmUp: RSS is flat when
// the last production window while the key is stuck holds what the
// first minute (or third of production) reached; the drain after
// production and the read-back after recovery do not count.
func TestRSSGrowthIsTheLastProductionWindowOverTheWarmUp(t *testing.T) {
	ws := func(rss ...float64) []stuckWindow {
		var out []stuckWindow
		for _, v := range rss {
			out = append(out, stuckWindow{Producing: v > 0, RSSMB: math.Abs(v)})
		}
		return out
	}
	tests := []struct {
		name     string
		ws       []stuckWindow
		recovery float64
		want     float64
	}{
		{"flat after a warm-up", ws(50, 80, 100, 100, 100, 100, 100, 100, 100, 100), 0, 1},
		{"growing past the warm-up", ws(50, 60, 70, 80, 90, 100, 110, 120, 130, 140), 0, 2},
		{"short production: its first third", ws(50, 100, 100, 100, 100, 110), 0, 1.1},
		{"the drain is left out (negative: not producing)", ws(100, 100, 100, -500), 0, 1},
		{"the read-back after recovery is left out", ws(100, 100, 100, 100, 100, 100, 100, 130, 130), 70, 1},
		{"growing while stuck counts before recovery", ws(50, 60, 70, 80, 90, 100, 140, 100, 100), 70, 140.0 / 60},
		{"no reading", nil, 0, notMeasured},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i := range tt.ws {
				tt.ws[i].Start = float64(i) * stuckWidth.Seconds()
			}
			if got := rssGrowth(tt.ws, tt.recovery); got < tt.want-1e-9 || got > tt.want+1e-9 {
				t.Errorf("growth %v, want %v", got, tt.want)
			}
		})
	}
}

// TestPerGapIsTakenAtTheMostGaps: bytes per gap divide the tracking
// hash's size by its gaps at the sample with the most of them; the
// marginal figure divides its growth by the gaps added.
func TestPerGapIsTakenAtTheMostGaps(t *testing.T) {
	gaps, bytes, per := perGap([]trackSample{{Gaps: 0, Bytes: 200}, {Gaps: 100, Bytes: 4000}, {Gaps: 50, Bytes: 9000}})
	if gaps != 100 || bytes != 4000 || per != 40 {
		t.Errorf("got %d gaps, %d B, %v B/gap; want 100, 4000, 40", gaps, bytes, per)
	}
	if _, _, per := perGap([]trackSample{{Bytes: 200}}); per != notMeasured {
		t.Errorf("without a gap: %v B/gap, want not measured", per)
	}
	if got := marginalPerGap([]trackSample{{Gaps: 2, Bytes: 1000}, {Gaps: 102, Bytes: 3000}, {Gaps: 50, Bytes: 2100}}); got != 20 {
		t.Errorf("marginal %v B/gap, want 20 (2,000 B over 100 gaps)", got)
	}
	if got := marginalPerGap([]trackSample{{Gaps: 2, Bytes: 1000}, {Gaps: 5, Bytes: 1900}}); got != notMeasured {
		t.Errorf("marginal %v B/gap over 3 gaps, want not measured", got)
	}
}

// TestMeasureFindsTheFailingKeysLastRecordAfterRecovery: the time from
// recovery to the failing key's last record is taken only when all of
// its records were delivered.
func TestMeasureFindsTheFailingKeysLastRecordAfterRecovery(t *testing.T) {
	d := newDataset(dataSpec{Records: 200, Keys: 10, ValueBytes: 32, Special: specialFailing, SpecialShare: 0.2, Seed: 3})
	start := 1000 * sec
	deliver := func(run *sinkRun, special bool) {
		for i := range d.spec.Records {
			at := start + 5*sec
			if d.key[i] == 0 {
				if !special {
					continue
				}
				at = start + 37*sec
			}
			run.firstOK[i].Store(at)
		}
	}
	for _, tt := range []struct {
		name    string
		special bool
		want    float64
	}{
		{"every record delivered", true, 7},
		{"the failing key's records still waiting", false, notMeasured},
	} {
		t.Run(tt.name, func(t *testing.T) {
			run := newSinkRun(d, sinkSpec{FailRecord: -1}, true)
			deliver(run, tt.special)
			r := &stuckRun{Recovery: 30}
			r.measure(run, d, nil, nil, nil, start, start+40*sec, start+59*sec)
			if r.RecoveredLast != tt.want {
				t.Errorf("recovery to last: %v s, want %v", r.RecoveredLast, tt.want)
			}
			if len(r.Windows) != 5 || !r.Windows[3].Producing || r.Windows[4].Producing {
				t.Errorf("windows %+v, want 5 (the partial sixth left out), the first 4 within production", r.Windows)
			}
			if want := float64(r.OthersTotal) / 10 / 4; r.MeanRate != want {
				t.Errorf("mean rate %v over the production windows, want %v", r.MeanRate, want)
			}
			if got := r.Windows[0].OthersRate * 10; int64(got) != r.OthersTotal {
				t.Errorf("first window: %v other records, want %d", got, r.OthersTotal)
			}
			if r.ParkedMax != notMeasured {
				t.Errorf("parked %d without samples, want not measured", r.ParkedMax)
			}
		})
	}
}

// TestParkedAndRereadTellANodeWithoutParkingFromZero: a node that does
// not publish keyhook.records.parked reads n/a; one that does, before
// its first re-read, has re-read nothing.
func TestParkedAndRereadTellANodeWithoutParkingFromZero(t *testing.T) {
	d := newDataset(dataSpec{Records: 10, Keys: 2, ValueBytes: 32, Special: specialFailing, SpecialShare: 0.2, Seed: 3})
	start := 1000 * sec
	tests := []struct {
		name                 string
		samples              []sample
		wantParked, wantRead int64
	}{
		{"no parking metrics", []sample{{T: start + sec}}, int64(notMeasured), int64(notMeasured)},
		{"parking, no re-read yet", []sample{{T: start + sec, ParkedSeen: true, Parked: 40}, {T: start + 2*sec, ParkedSeen: true, Parked: 70}}, 70, 0},
		{"parking and re-reading", []sample{{T: start + sec, ParkedSeen: true, Parked: 40, RereadSeen: true, Reread: 12}, {T: start + 2*sec, ParkedSeen: true, RereadSeen: true, Reread: 30}}, 40, 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &stuckRun{}
			r.measure(newSinkRun(d, sinkSpec{FailRecord: -1}, true), d, tt.samples, nil, nil, start, start+10*sec, start+10*sec)
			if r.ParkedMax != tt.wantParked || r.Reread != tt.wantRead {
				t.Errorf("parked max %d, re-read %d; want %d, %d", r.ParkedMax, r.Reread, tt.wantParked, tt.wantRead)
			}
			if got := r.Windows[0].Parked; got != tt.wantParked {
				t.Errorf("window parked %d, want %d", got, tt.wantParked)
			}
		})
	}
}

// TestSinkFailsTheFailingKeyUntilItRecovers: the failing key's requests
// are answered 503 until failUntil, the other keys' always 2xx.
func TestSinkFailsTheFailingKeyUntilItRecovers(t *testing.T) {
	d := newDataset(dataSpec{Records: 100, Keys: 5, ValueBytes: 32, Special: specialFailing, SpecialShare: 0.3, Seed: 1})
	failing, other := -1, -1
	for i := range d.spec.Records {
		if d.key[i] == 0 && failing < 0 {
			failing = i
		}
		if d.key[i] != 0 && other < 0 {
			other = i
		}
	}
	s := &sink{}
	run := newSinkRun(d, sinkSpec{FailRecord: -1}, true)
	s.begin(run)
	post := func(id int) int {
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/hook", bytes.NewReader(d.body(id, time.Now()))))
		return w.Code
	}
	run.failUntil.Store(time.Now().Add(time.Hour).UnixNano())
	if got := post(failing); got != http.StatusServiceUnavailable {
		t.Errorf("failing key before recovery: %d, want 503", got)
	}
	if got := post(other); got != http.StatusNoContent {
		t.Errorf("other key: %d, want 204", got)
	}
	run.failUntil.Store(time.Now().UnixNano())
	if got := post(failing); got != http.StatusNoContent {
		t.Errorf("failing key after recovery: %d, want 204", got)
	}
	if got := run.delivered.Load(); got != 2 {
		t.Errorf("%d records delivered, want 2", got)
	}
}

// TestStatusKBReadsAFieldOfProcStatus: the RSS sampler's parsing.
func TestStatusKBReadsAFieldOfProcStatus(t *testing.T) {
	status := "Name:\tbench\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nThreads:\t9\n"
	if v, ok := statusKB(status, "VmRSS"); !ok || v != 102400 {
		t.Errorf("VmRSS: %d, %v; want 102400", v, ok)
	}
	if _, ok := statusKB(status, "VmSwap"); ok {
		t.Error("VmSwap found in a status without it")
	}
}

// TestStuckFlagsShapeScenarioSeven: the -stuck-* flags reach scenario 7,
// which runs only when named.
func TestStuckFlagsShapeScenarioSeven(t *testing.T) {
	var discard bytes.Buffer
	opts, err := parseFlags([]string{"-scenarios", "7", "-stuck-rate", "800", "-stuck-fail", "30s", "-stuck-share", "0.01"}, &discard)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	scs, err := buildScenarios(opts)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	if len(scs) != 1 || scs[0].Stuck == nil {
		t.Fatalf("scenarios %+v, want scenario 7 alone", scs)
	}
	want := defaultStuck
	want.Rate, want.Fail, want.FailShare = 800, 30*time.Second, 0.01
	if diff := cmp.Diff(want, *scs[0].Stuck); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
	if scs[0].Partitions != 1 || scs[0].MaxInFlight != 1000 {
		t.Errorf("%d partitions, max_in_flight %d; want 1 and 1,000", scs[0].Partitions, scs[0].MaxInFlight)
	}
	def, err := parseFlags(nil, &discard)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	scs, err = buildScenarios(def)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	for _, s := range scs {
		if s.Stuck != nil {
			t.Error("the default run includes scenario 7, which takes ~25 minutes")
		}
	}
	if _, err := parseFlags([]string{"-stuck-share", "0"}, &discard); err == nil {
		t.Error("-stuck-share 0 accepted")
	}
}

// TestStuckScenarioRunsEndToEnd runs scenario 7 at a CI size (500 rec/s,
// seconds of failure): three runs, every 10 s window measured with the
// node's RSS, the failing key's records all delivered in order once it
// recovered, and results.md, results.json and stuck.png written (no
// throughput chart: the scenario has no bar in it). It asserts nothing
// about the rates.
func TestStuckScenarioRunsEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server, Kafka and a keyhook child process per run")
	}
	out := t.TempDir()
	opts := options{scenarios: []string{"7"}, out: out, latency: distFixed, stuck: stuckSpec{
		Rate: 500, Baseline: 10 * time.Second,
		Fail: 12 * time.Second, After: 3 * time.Second, FailShare: 0.02, FailDrain: 30 * time.Second,
		Slow: 10 * time.Second, SlowShare: 0.01, SlowDrain: 2 * time.Second,
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	res, err := run(ctx, opts, "go test ./test/bench", testWriter{t})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	s := res.scenario("7")
	if s == nil || s.Stuck == nil || len(s.Stuck.Runs) != 3 {
		t.Fatalf("scenario 7: %+v, want three stuck runs", s)
	}
	if s.Stuck.BaselineRate <= 0 {
		t.Errorf("run a's rate %v, want > 0", s.Stuck.BaselineRate)
	}
	for _, r := range s.Stuck.Runs {
		if len(r.Windows) == 0 || r.MinRatio < 0 {
			t.Errorf("%s: %d windows, min ratio %v; want windows with a ratio", r.Name, len(r.Windows), r.MinRatio)
		}
		if r.RSSMaxMB <= 0 {
			t.Errorf("%s: no RSS read", r.Name)
		}
		if r.Overlaps != 0 || r.Reorders != 0 {
			t.Errorf("%s: per-key order broken: %d overlapping requests, %d out of order", r.Name, r.Overlaps, r.Reorders)
		}
		if r.Kind == stuckFailing && (r.SpecialDone != r.SpecialTotal || r.RecoveredLast < 0) {
			t.Errorf("%s: %d of %d of the failing key's records delivered (last %v s after recovery), want all", r.Name, r.SpecialDone, r.SpecialTotal, r.RecoveredLast)
		}
	}
	for f, want := range map[string]bool{"results.md": true, "results.json": true, "stuck.png": true, "throughput.png": false} {
		st, err := os.Stat(filepath.Join(out, f))
		if got := err == nil && st.Size() > 0; got != want {
			t.Errorf("%s written: %v, want %v", f, got, want)
		}
	}
}
