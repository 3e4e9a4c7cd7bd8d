package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"math"
	"strings"
)

// evaluateStuck checks scenario 7's goals on runs b and c.
func (r *results) evaluateStuck(s *scenarioResult) {
	st := s.Stuck
	var stuck []*stuckRun
	for _, run := range st.Runs {
		if run.Kind != stuckNone {
			stuck = append(stuck, run)
		}
	}
	if len(stuck) == 0 {
		return
	}
	goal := fmt.Sprintf("other keys ≥ %.0f%% of the no-failure rate in every 10 s window", 100*stuckRatioGoal)
	var parts []string
	ok, measured := true, false
	for _, run := range stuck {
		if run.MinRatio < 0 {
			parts = append(parts, run.Name+": no full window")
			continue
		}
		measured = true
		ok = ok && run.MinRatio >= stuckRatioGoal
		parts = append(parts, fmt.Sprintf("%s: min %.2f at %.0f s (mean %.0f of %.0f rec/s expected)", run.Name, run.MinRatio, run.MinRatioAt, run.MeanRate, run.Expected))
	}
	if measured {
		r.add(s.ID, goal, ok, "%s; run a: %.0f rec/s%s", strings.Join(parts, "; "), st.BaselineRate, stuckNoisy(st.Runs))
	} else {
		r.missing(s.ID, goal, strings.Join(parts, "; "))
	}

	goal = fmt.Sprintf("RSS flat while the key is stuck: its last window ≤ %.2f× the first minute's", stuckRSSGoal)
	parts, ok, measured = nil, true, false
	for _, run := range stuck {
		if run.RSSGrowth < 0 {
			continue
		}
		measured = true
		ok = ok && run.RSSGrowth <= stuckRSSGoal
		parts = append(parts, fmt.Sprintf("%s: %.2f× (%.0f–%.0f MiB over the whole run, reading back after recovery included)", run.Name, run.RSSGrowth, run.RSSMinMB, run.RSSMaxMB))
	}
	if measured {
		r.add(s.ID, goal, ok, "%s", strings.Join(parts, "; "))
	} else {
		r.missing(s.ID, goal, "no RSS reading")
	}

	goal = fmt.Sprintf("Redis ≤ %d bytes per gap at the most gaps", stuckGapGoal)
	parts, ok, measured = nil, true, false
	for _, run := range stuck {
		if run.BytesPerGap < 0 {
			continue
		}
		measured = true
		ok = ok && run.BytesPerGap <= stuckGapGoal
		parts = append(parts, fmt.Sprintf("%s: %.1f B/gap (%d gaps, %d B; marginal %s B/gap)", run.Name, run.BytesPerGap, run.MaxGaps, run.GapBytes, num(run.MarginalPerGap, 1)))
	}
	if measured {
		r.add(s.ID, goal, ok, "%s", strings.Join(parts, "; "))
	} else {
		r.missing(s.ID, goal, "no gap was seen in the tracking state")
	}

	for _, run := range stuck {
		if run.Kind != stuckFailing {
			continue
		}
		all := run.SpecialDone == run.SpecialTotal && run.SpecialTotal > 0
		r.add(s.ID, "failing key's records all delivered, in order, after it recovers", all && run.Overlaps == 0 && run.Reorders == 0,
			"%d/%d delivered, the last %s s after recovery; %d overlapping requests, %d out of order (every key), %d duplicates",
			run.SpecialDone, run.SpecialTotal, num(run.RecoveredLast, 1), run.Overlaps, run.Reorders, run.Duplicates)
	}
}

// stuckNoisy warns when other processes took a large share of the
// machine during a run the ratios compare.
func stuckNoisy(runs []*stuckRun) string {
	var parts []string
	for _, r := range runs {
		if r.OthersCPU > noisyShare {
			parts = append(parts, fmt.Sprintf("%s %.0f%%", r.Name, 100*r.OthersCPU))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "; other processes took CPU during the runs (" + strings.Join(parts, ", ") + "): unreliable"
}

// stuckMarkdown is scenario 7's part of results.md.
func stuckMarkdown(b *strings.Builder, s *scenarioResult) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	st, sc := s.Stuck, s.Scenario
	sp := st.Spec
	w("\n## Scenario %s: %s\n\n", s.ID, s.Title)
	w("%d keys, %d partition, %d-byte values, max_in_flight %d, endpoint %s, %.0f rec/s offered. Run a: %v of production. "+
		"Run b: one key carrying %.1f%% fails for %v, production goes on %v after it recovers, then up to %v to deliver the rest. "+
		"Run c: one key carrying %.1f%% is answered in 1 s for %v of production, then up to %v. Chart: stuck.png.\n\n",
		sc.Data.Keys, sc.Partitions, sc.Data.ValueBytes, sc.MaxInFlight, sc.Sink.Latency, sp.Rate, sp.Baseline,
		100*sp.FailShare, sp.Fail, sp.After, sp.FailDrain, 100*sp.SlowShare, sp.Slow, sp.SlowDrain)
	w("| run | outcome | produced (rec/s) | other keys rec/s (mean) | expected | min ratio (at s) | RSS MiB min–max | RSS last/first | parked max | re-read | gaps max | Redis B at max gaps | B/gap (marginal) | special key delivered | recovery → its last s | overlaps / reorders | duplicates | 503s | others' CPU |\n")
	w("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range st.Runs {
		special := "–"
		if r.SpecialTotal > 0 {
			special = fmt.Sprintf("%d/%d", r.SpecialDone, r.SpecialTotal)
		}
		w("| %s | %s | %d (%.0f) | %.0f | %.0f | %s (%s) | %s–%s | %s | %s | %s | %d | %d | %s (%s) | %s | %s | %d / %d | %d | %d | %s |\n",
			r.Name, r.Outcome, r.Produced, r.Achieved, r.MeanRate, r.Expected, num(r.MinRatio, 3), num(r.MinRatioAt, 0),
			num(r.RSSMinMB, 0), num(r.RSSMaxMB, 0), num(r.RSSGrowth, 2), numi(r.ParkedMax), numi(r.Reread),
			r.MaxGaps, r.GapBytes, num(r.BytesPerGap, 1), num(r.MarginalPerGap, 1), special, num(r.RecoveredLast, 1),
			r.Overlaps, r.Reorders, r.Duplicates, r.Errors, pct(r.OthersCPU))
	}
	for _, r := range st.Runs {
		w("\n<details><summary>%s: every 10 s window</summary>\n\n", r.Name)
		w("| from s | producing | other keys rec/s | ratio | special key delivered | RSS MiB | parked | re-read so far | gaps | Redis B |\n|---|---|---|---|---|---|---|---|---|---|\n")
		for _, win := range r.Windows {
			prod := ""
			if win.Producing {
				prod = "yes"
			}
			w("| %.0f | %s | %.0f | %s | %d | %s | %s | %s | %s | %s |\n", win.Start, prod, win.OthersRate, num(win.Ratio, 3), win.SpecialDone,
				num(win.RSSMB, 1), numi(win.Parked), numi(win.Reread), numi(win.Gaps), numi(win.RedisBytes))
		}
		w("\n</details>\n")
	}
	var notes []string
	notes = append(notes, sc.Notes...)
	notes = append(notes, "RSS is the node's VmRSS read every second from /proc while it runs (last/first: the last production window over the largest of the first minute, or first third, of production); parked and re-read are the node's keyhook.records.parked (most at once) and keyhook.records.reread (total), n/a when the node does not publish them; "+
		"gaps are the partition's acked ranges above the watermark and Redis B the MEMORY USAGE of its tracking hash, every 500 ms; B/gap is taken at the sample with the most gaps, the hash's fixed cost included; marginal leaves it out (the growth from the sample with the fewest gaps).")
	for _, r := range st.Runs {
		for _, n := range r.Notes {
			notes = append(notes, r.Name+": "+n)
		}
	}
	w("\n")
	for _, n := range notes {
		w("- %s\n", n)
	}
}

// throughputScenarios leaves out the scenarios the throughput chart has
// no bar for.
func throughputScenarios(ss []*scenarioResult) []*scenarioResult {
	var out []*scenarioResult
	for _, s := range ss {
		if s.Stuck == nil {
			out = append(out, s)
		}
	}
	return out
}

var (
	ratioColor = color.RGBA{0x1f, 0x77, 0xb4, 0xff}
	rssColor   = color.RGBA{0xff, 0x7f, 0x0e, 0xff}
	goalColor  = color.RGBA{0xd6, 0x27, 0x28, 0xff}
)

// writeStuckChart draws, for each of runs b and c, the other keys' ratio
// to the no-failure rate (left axis) and the node's RSS (right axis) per
// 10 s window.
func writeStuckChart(path string, r *results, s *scenarioResult) error {
	var runs []*stuckRun
	for _, run := range s.Stuck.Runs {
		if run.Kind != stuckNone {
			runs = append(runs, run)
		}
	}
	const (
		width       = 1400
		panelH      = 300
		left, right = 90, 110
		top         = 70
		gap         = 60
	)
	height := top + max(1, len(runs))*(panelH+gap) + 40
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	draw.Draw(img, img.Bounds(), image.NewUniform(white), image.Point{}, draw.Src)
	title := fmt.Sprintf("keyhook, scenario 7 (stuck key): other keys' rate / no-failure rate, and the node's RSS, per 10 s (%.0f rec/s offered)", s.Stuck.Spec.Rate)
	if r.Quick {
		title += " - QUICK RUN"
	}
	text(img, left, 30, title, ink)
	text(img, left, 50, fmt.Sprintf("%d CPUs, %s; %s", r.Machine.CPUs, r.Machine.Model, r.Date), ink)
	fill(img, image.Rect(width-right-330, 22, width-right-314, 36), ratioColor)
	text(img, width-right-308, 34, "ratio (left)", ink)
	fill(img, image.Rect(width-right-210, 22, width-right-194, 36), rssColor)
	text(img, width-right-188, 34, "RSS MiB (right)", ink)

	plotW := width - left - right
	for pi, run := range runs {
		y0 := top + pi*(panelH+gap) + 20
		text(img, left, y0-8, fmt.Sprintf("%s: min ratio %s, RSS %s-%s MiB, parked max %s, gaps max %d", run.Name,
			num(run.MinRatio, 2), num(run.RSSMinMB, 0), num(run.RSSMaxMB, 0), numi(run.ParkedMax), run.MaxGaps), ink)
		n := len(run.Windows)
		if n == 0 {
			continue
		}
		x := func(i float64) int { return left + int(i/float64(max(1, n))*float64(plotW)) }
		const ratioTop = 1.2
		yr := func(v float64) int { return y0 + panelH - int(min(v, ratioTop)/ratioTop*float64(panelH)) }
		rssTop := 1.0
		for _, win := range run.Windows {
			rssTop = max(rssTop, win.RSSMB)
		}
		rssTop = niceCeil(rssTop * 1.1)
		ym := func(v float64) int { return y0 + panelH - int(v/rssTop*float64(panelH)) }
		for _, v := range []float64{0, 0.25, 0.5, 0.75, 1} {
			hline(img, left, left+plotW, yr(v), grid)
			l := fmt.Sprintf("%.2f", v)
			text(img, left-10-7*len(l), yr(v)+4, l, ink)
		}
		for _, f := range []float64{0.5, 1} {
			l := compact(rssTop * f)
			text(img, left+plotW+8, ym(rssTop*f)+4, l, ink)
		}
		dashed(img, left, left+plotW, yr(stuckRatioGoal), goalColor)
		vline(img, left, y0, y0+panelH, ink)
		vline(img, left+plotW, y0, y0+panelH, ink)
		hline(img, left, left+plotW, y0+panelH, ink)
		// Production's end, and the failing key's recovery.
		for i, win := range run.Windows {
			if !win.Producing && (i == 0 || run.Windows[i-1].Producing) {
				vline(img, x(float64(i)), y0, y0+panelH, grid)
				text(img, x(float64(i))+4, y0+14, "production ends", ink)
			}
		}
		if run.Recovery > 0 {
			rx := x(run.Recovery / stuckWidth.Seconds())
			vline(img, rx, y0, y0+panelH, goalColor)
			text(img, rx+4, y0+28, "key recovers", ink)
		}
		step := max(1, n/10)
		for i := 0; i < n; i += step {
			l := fmt.Sprintf("%.0fs", run.Windows[i].Start)
			text(img, x(float64(i))-7*len(l)/2, y0+panelH+16, l, ink)
		}
		var pr, pm image.Point
		havePR, havePM := false, false
		for i, win := range run.Windows {
			cx := x(float64(i) + 0.5)
			if win.Ratio >= 0 {
				p := image.Pt(cx, yr(win.Ratio))
				if havePR {
					line(img, pr, p, ratioColor)
				}
				pr, havePR = p, true
			} else {
				havePR = false
			}
			if win.RSSMB >= 0 {
				p := image.Pt(cx, ym(win.RSSMB))
				if havePM {
					line(img, pm, p, rssColor)
				}
				pm, havePM = p, true
			}
		}
	}
	return savePNG(path, img)
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// line draws a 2-pixel line from a to b.
func line(img *image.RGBA, a, b image.Point, c color.Color) {
	dx, dy := b.X-a.X, b.Y-a.Y
	n := max(abs(dx), abs(dy), 1)
	for i := 0; i <= n; i++ {
		x := a.X + dx*i/n
		y := a.Y + dy*i/n
		fill(img, image.Rect(x, y, x+2, y+2), c)
	}
}

func dashed(img *image.RGBA, x0, x1, y int, c color.Color) {
	for x := x0; x < x1; x += 12 {
		hline(img, x, min(x+6, x1), y, c)
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}
