package tracking

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestScriptsNameFieldsOnlyThroughTheGoConstants fails when a script
// spells a field name as a literal instead of reading it from F, which
// is built from the constants decodeState reads.
func TestScriptsNameFieldsOnlyThroughTheGoConstants(t *testing.T) {
	for name, body := range map[string]string{"lib": libLua, "upgrade": upgradeLua, "claim": claimLua, "seed": seedLua, "flush": flushFuncLua, "flush round": flushRoundLua, "release": releaseLua} {
		for _, f := range scriptFields {
			for _, lit := range []string{strconv.Quote(f[1]), "'" + f[1] + "'"} {
				if strings.Contains(body, lit) {
					t.Errorf("%s script spells the field %s as %s; want F.%s", name, f[1], lit, f[0])
				}
			}
		}
	}
	if !strings.HasPrefix(fieldsLua, `local F = {epoch = "`+fieldEpoch+`", `) || !strings.HasSuffix(fieldsLua, "}\n") {
		t.Errorf("fieldsLua = %q; want one line declaring F from the field constants", fieldsLua)
	}
}

// TestScriptsWriteExactlyTheFieldsTheDecoderReads runs the scripts on a
// real Redis and checks that the HASH they leave holds the decoder's
// fields and no other: the partition's, and the claim's under its prefix.
func TestScriptsWriteExactlyTheFieldsTheDecoderReads(t *testing.T) {
	ctx := context.Background()
	s, rdb, _ := newStore(t, Config{})
	c, err := s.ClaimTopic(ctx, pkA, "node-a", 1, "topic-id-1")
	if err != nil {
		t.Fatalf("ClaimTopic: %v", err)
	}
	if err := s.Flush(ctx, pkA, Flush{Epoch: c.Epoch, Acked: setOf(), Watermark: 1, Fetched: 2,
		Committed: 0, Pending: 1, InFlight: 1, Keys: 1, Oldest: time.UnixMilli(5),
		Stalled: &StalledKeys{Keys: []StalledKey{{Key: "k", Offset: 1, State: "parked"}}, Total: 1}}); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if err := s.Release(ctx, pkA, c.Epoch); err != nil {
		t.Fatalf("Release: %v", err)
	}
	want := slices.Clone(partitionFields)
	for _, name := range claimFields {
		want = append(want, claimField(c.Epoch, name))
	}
	got, err := rdb.HKeys(ctx, s.key(pkA)).Result()
	if err != nil {
		t.Fatalf("HKEYS: %v", err)
	}
	slices.Sort(want)
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("fields written (-decoder's +scripts'):\n%s", diff)
	}
	// The released claim's counters no longer count: nothing is live.
	if p := load(t, s, pkA); p.Epoch != c.Epoch || p.Watermark != 1 || p.Fetched != 2 || p.Keys != 0 || p.Generation != 1 || p.Owner != "" ||
		p.TopicID != "topic-id-1" || len(p.Ranges) != 1 || p.Ranges[0].Epoch != c.Epoch || p.Ranges[0].Fetched != 2 {
		t.Errorf("Load = %+v; want what the scripts wrote", p)
	}
}

// The flush of every partition with one sharer runs each tick: it must
// read a handful of fields with one HMGET, never a whole HASH nor another
// claim's acked set, and leave the upgrade of the legacy layout to the
// claim.
func TestFlushScriptReadsOnlyTheFieldsItNeeds(t *testing.T) {
	for _, read := range []string{"HGETALL", "HVALS", "HKEYS", "HSCAN", `"HGET"`, "cf(p.e", "upgrade("} {
		if strings.Contains(flushFuncLua, read) {
			t.Errorf("flush script contains %s; want one HMGET of the partition's fields and its own claim's", read)
		}
	}
	if n := strings.Count(flushFuncLua, `"HMGET"`); n != 1 {
		t.Errorf("flush script has %d HMGET; want 1", n)
	}
}

// A claim nothing refers to is deleted by the list of its fields the
// scripts keep: it must be the list the decoder reads.
func TestScriptsDeleteEveryFieldOfAClaim(t *testing.T) {
	lua := map[string]string{}
	for _, f := range scriptFields {
		lua[f[1]] = f[0]
	}
	var want []string
	for _, name := range claimFields {
		want = append(want, "F."+lua[name])
	}
	start := strings.Index(libLua, "local function claimnames()")
	open := strings.Index(libLua[start:], "{")
	end := strings.Index(libLua[start:], "}")
	got := strings.Split(libLua[start+open+1:start+end], ", ")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("claimnames (-claimFields +script):\n%s", diff)
	}
}
