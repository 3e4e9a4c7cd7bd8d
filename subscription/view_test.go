package subscription

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestChangeOfReadsTheIdAndTheVersionTheChangeMade(t *testing.T) {
	for _, c := range []struct {
		payload string
		id      string
		version int64
		ok      bool
	}{
		{"sub_abc 7", "sub_abc", 7, true},
		{"sub_abc", "", 0, false}, // an earlier release's announcement
		{"sub_abc x", "", 0, false},
		{"sub_abc 0", "", 0, false},
		{"sub_abc -3", "", 0, false},
		{" 7", "", 0, false},
		{"", "", 0, false},
	} {
		id, v, ok := changeOf(c.payload)
		if id != c.id || v != c.version || ok != c.ok {
			t.Errorf("changeOf(%q) = %q, %d, %v; want %q, %d, %v", c.payload, id, v, ok, c.id, c.version, c.ok)
		}
	}
}

func FuzzChangeOf(f *testing.F) {
	f.Add("sub_abc 7")
	f.Add("sub_abc")
	f.Add("a b c")
	f.Fuzz(func(t *testing.T, payload string) {
		id, v, ok := changeOf(payload)
		if !ok {
			return
		}
		if id == "" || v <= 0 {
			t.Fatalf("changeOf(%q) = %q, %d accepted", payload, id, v)
		}
		rest, found := strings.CutPrefix(payload, id+" ")
		if n, err := strconv.ParseInt(rest, 10, 64); !found || err != nil || n != v {
			t.Fatalf("changeOf(%q) = %q, %d: not what the payload says", payload, id, v)
		}
	})
}

// viewJSON is what the store holds for a subscription named name.
func viewJSON(t *testing.T, id, name string, created time.Time) string {
	t.Helper()
	b, err := json.Marshal(&Subscription{ID: id, Name: name, CreatedAt: created, Version: 1})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A listing decodes only what changed: a subscription whose JSON is the
// same keeps its value, so the values fn gets for it are the same too.
func TestAViewDecodesOnlyWhatChanged(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	a, b := viewJSON(t, "sub_a", "a", t0), viewJSON(t, "sub_b", "b", t0.Add(time.Second))
	var v view
	if err := v.replace(map[string]string{"sub_a": a, "sub_b": b}, 2); err != nil {
		t.Fatal(err)
	}
	first := v.subs()
	if len(first) != 2 || first[0].ID != "sub_a" || first[1].ID != "sub_b" {
		t.Fatalf("the set is %v, want sub_a then sub_b", first)
	}
	firstA, firstB := first[0], first[1]
	if again := v.subs(); &again[0] != &first[0] {
		t.Errorf("an unchanged view gave a new slice")
	}

	b2 := viewJSON(t, "sub_b", "b2", t0.Add(time.Second))
	if err := v.replace(map[string]string{"sub_a": a, "sub_b": b2}, 3); err != nil {
		t.Fatal(err)
	}
	second := v.subs()
	if second[0] != firstA {
		t.Errorf("sub_a, unchanged, was decoded again")
	}
	if second[1] == firstB || second[1].Name != "b2" {
		t.Errorf("sub_b, changed, is %+v; want the new JSON decoded", second[1])
	}
	if firstB.Name != "b" {
		t.Errorf("the value an earlier call got changed to %q", firstB.Name)
	}

	c := viewJSON(t, "sub_c", "c", t0.Add(-time.Second))
	if err := v.put("sub_c", c); err != nil {
		t.Fatal(err)
	}
	v.remove("sub_a")
	third := v.subs()
	if len(third) != 2 || third[0].ID != "sub_c" || third[1] != second[1] {
		t.Errorf("after a put and a remove the set is %v, want sub_c then the same sub_b", third)
	}
	if err := v.put("sub_d", `{"id":"sub_other"}`); err == nil {
		t.Errorf("a subscription stored under another id was taken")
	}
	if err := v.replace(map[string]string{"sub_a": "{"}, 4); err == nil || v.version != 3 {
		t.Errorf("a listing that does not decode: err %v, version %d; want an error and the view unchanged", err, v.version)
	}
}
