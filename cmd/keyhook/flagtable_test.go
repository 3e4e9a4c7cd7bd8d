package main

import (
	"flag"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// flagTablePage is the page holding the table of keyhook serve's flags.
const flagTablePage = "../../docs/configuration.md"

// flagTableHeader opens the table on flagTablePage.
const flagTableHeader = "| flag | default | meaning |"

// The table of flags in the docs is checked against their declaration:
// every flag of keyhook serve is in it with its default, and it names no
// other. A row may list several flags: its default is then one for all,
// or one per flag, in order, separated by ", ".
func TestTheFlagTableListsEveryFlagWithItsDefault(t *testing.T) {
	b, err := os.ReadFile(flagTablePage)
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{}
	for _, row := range flagTable(t, string(b)) {
		names := regexp.MustCompile("`--([a-z0-9-]+)`").FindAllStringSubmatch(row[0], -1)
		if len(names) == 0 {
			t.Errorf("row %q names no flag", row[0])
		}
		defs := []string{row[1]}
		if len(names) > 1 {
			if split := strings.Split(row[1], ", "); len(split) == len(names) {
				defs = split
			}
		}
		for i, m := range names {
			if _, dup := documented[m[1]]; dup {
				t.Errorf("--%s is in the table twice", m[1])
			}
			documented[m[1]] = defs[min(i, len(defs)-1)]
		}
	}

	var c config
	fs := flag.NewFlagSet("keyhook serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	knobs, _ := c.flags(fs)
	doc := map[string]string{"kafka-brokers": "(required)", "redis-url": "(required)"}
	for _, k := range knobs {
		if k.doc != "" {
			doc[k.name] = k.doc
		}
	}
	declared := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		want := doc[f.Name]
		switch {
		case want != "":
		case f.DefValue == "":
			want = "—"
		default:
			want = "`" + f.DefValue + "`"
		}
		declared[f.Name] = want
	})
	for _, name := range slices.Sorted(maps.Keys(declared)) {
		want := declared[name]
		got, ok := documented[name]
		switch {
		case !ok:
			t.Errorf("--%s is declared but not in the table of %s", name, flagTablePage)
		case got != want && !strings.HasPrefix(got, want+" ("):
			t.Errorf("--%s: the table says default %s; the declaration says %s", name, got, want)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(documented)) {
		if _, ok := declared[name]; !ok {
			t.Errorf("--%s is in the table of %s but keyhook serve declares no such flag", name, flagTablePage)
		}
	}
}

// flagTable returns the flag and default cells of the rows of the table
// under flagTableHeader.
func flagTable(t *testing.T, page string) [][2]string {
	t.Helper()
	_, rest, ok := strings.Cut(page, flagTableHeader+"\n")
	if !ok {
		t.Fatalf("%s has no table headed %q", flagTablePage, flagTableHeader)
	}
	var rows [][2]string
	for i, line := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		if i == 0 {
			continue // the separator row
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 3 {
			t.Fatalf("row %q: want flag, default and meaning", line)
		}
		rows = append(rows, [2]string{strings.TrimSpace(cells[0]), strings.TrimSpace(cells[1])})
	}
	return rows
}
