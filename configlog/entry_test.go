package configlog

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func live(id string, v int64) Entry { return Entry{ID: id, Version: v, Data: []byte(id)} }
func gone(id string, v int64) Entry { return Entry{ID: id, Version: v} }

func entries(es ...Entry) map[string]Entry {
	m := make(map[string]Entry, len(es))
	for _, e := range es {
		m[e.ID] = e
	}
	return m
}

func TestReconcileLetsTheHigherVersionWinAndTombstonesBeatOlderEntries(t *testing.T) {
	for _, tc := range []struct {
		name       string
		log, redis map[string]Entry
		want       Plan
	}{
		{name: "in step", log: entries(live("a", 3), gone("b", 2)), redis: entries(live("a", 3))},
		{
			name: "Redis flushed: everything live comes back, nothing deleted does",
			log:  entries(live("a", 1), live("b", 4), gone("c", 2)),
			want: Plan{Restore: []Entry{live("a", 1), live("b", 4)}},
		},
		{
			name:  "Redis rolled back: older versions restored, deleted entries removed",
			log:   entries(live("a", 5), gone("b", 3), live("c", 1)),
			redis: entries(live("a", 2), live("b", 2), live("c", 1)),
			want:  Plan{Restore: []Entry{live("a", 5)}, Remove: []Entry{gone("b", 3)}},
		},
		{
			name:  "Redis ahead of the log or unknown to it: adopted",
			log:   entries(live("a", 1)),
			redis: entries(live("a", 2), live("z", 7)),
			want:  Plan{Adopt: []Entry{live("a", 2), live("z", 7)}},
		},
		{
			name:  "an entry written again above its delete is adopted, not removed",
			log:   entries(gone("a", 3)),
			redis: entries(live("a", 3)),
			want:  Plan{Adopt: []Entry{live("a", 3)}},
		},
		{
			name:  "a tombstone of something Redis never had does nothing",
			log:   entries(gone("a", 3)),
			redis: entries(),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Reconcile(tc.log, tc.redis)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Reconcile (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStateKeepsTheHighestVersionAndTheLaterOfEqualOnes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		records  []Entry
		want     Entry
		wantLast int64
	}{
		{name: "in order", records: []Entry{live("a", 1), live("a", 2), gone("a", 3)}, want: gone("a", 3), wantLast: 3},
		{name: "a stale record after a delete loses", records: []Entry{live("a", 1), gone("a", 2), live("a", 1)}, want: gone("a", 2), wantLast: 1},
		{name: "of equal versions the later wins", records: []Entry{gone("a", 2), {ID: "a", Version: 2, Data: []byte("again")}}, want: Entry{ID: "a", Version: 2, Data: []byte("again")}, wantLast: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &state{entries: map[string]map[string]*logged{}}
			for _, r := range tc.records {
				st.apply("k", r)
			}
			got := st.entries["k"]["a"]
			if diff := cmp.Diff(tc.want, got.win); diff != "" {
				t.Errorf("winner (-want +got):\n%s", diff)
			}
			if got.last != tc.wantLast {
				t.Errorf("last version read = %d, want %d", got.last, tc.wantLast)
			}
		})
	}
}

func TestSettledActsOnlyOnDifferencesThatOutliveARound(t *testing.T) {
	st := &state{planned: map[string]map[planKey]bool{}}
	first := st.settled("k", Plan{Restore: []Entry{live("a", 1)}, Remove: []Entry{gone("b", 2)}, Adopt: []Entry{live("c", 1)}})
	if diff := cmp.Diff(Plan{Adopt: []Entry{live("c", 1)}}, first, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("first round (-want +got):\n%s", diff)
	}
	// a moved on to version 2 meanwhile (a store's change in flight):
	// only b's difference outlived the round.
	second := st.settled("k", Plan{Restore: []Entry{live("a", 2)}, Remove: []Entry{gone("b", 2)}})
	if diff := cmp.Diff(Plan{Remove: []Entry{gone("b", 2)}}, second, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("second round (-want +got):\n%s", diff)
	}
}

func TestConfigValidateNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Topic: "bad topic"}, "Topic"},
		{Config{Interval: -1}, "Interval"},
		{Config{WriteTimeout: -1}, "WriteTimeout"},
		{Config{WriteTimeout: time.Millisecond}, "WriteTimeout"},
	} {
		err := tc.cfg.Validate()
		if err == nil || !contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("zero Config: %v", err)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
