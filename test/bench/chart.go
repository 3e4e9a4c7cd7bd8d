package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"strings"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// The chart is drawn with the standard library's image packages and
// x/image's basicfont (a fixed 7×13 bitmap face), the one small
// dependency needed for labels; a plotting library would bring far more.

var contenderColors = map[string]color.RGBA{
	cBaseline.Name:  {0x8c, 0x8c, 0x8c, 0xff},
	cKey.Name:       {0x1f, 0x77, 0xb4, 0xff},
	cPartition.Name: {0xff, 0x7f, 0x0e, 0xff},
	cNone.Name:      {0x2c, 0xa0, 0x2c, 0xff},
	cCeilingA.Name:  {0x94, 0x67, 0xbd, 0xff},
	cCeilingB.Name:  {0x8c, 0x56, 0x4b, 0xff},
	cParallel.Name:  {0xd6, 0x27, 0x28, 0xff},
	cWrk.Name:       {0xe3, 0x77, 0xc2, 0xff},
	cKeyBatch.Name:  {0x17, 0xbe, 0xcf, 0xff},
	cKeyShared.Name: {0xbc, 0xbd, 0x22, 0xff},
}

var (
	ink   = color.RGBA{0x20, 0x20, 0x20, 0xff}
	grid  = color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	white = color.RGBA{0xff, 0xff, 0xff, 0xff}
)

// writeChart draws records/s by scenario and contender, log scale.
func writeChart(path string, r *results) error {
	const (
		width, height = 1400, 720
		left, right   = 90, 250
		top, bottom   = 70, 105
	)
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	draw.Draw(img, img.Bounds(), image.NewUniform(white), image.Point{}, draw.Src)

	lo, hi := math.Inf(1), 0.0
	for _, s := range r.Scenarios {
		for _, run := range s.Runs {
			if run.Rate > 0 {
				lo, hi = min(lo, run.Rate), max(hi, run.Rate)
			}
		}
	}
	if hi == 0 {
		lo, hi = 1, 10
	}
	lo10 := math.Floor(math.Log10(lo))
	hi10 := math.Ceil(math.Log10(hi))
	if hi10 == lo10 {
		hi10++
	}
	plotW, plotH := width-left-right, height-top-bottom
	y := func(v float64) int {
		f := (math.Log10(v) - lo10) / (hi10 - lo10)
		return top + plotH - int(f*float64(plotH))
	}

	title := "keyhook: records/s by scenario and contender (log scale)"
	if r.Quick {
		title += " - QUICK RUN, not representative"
	}
	text(img, left, 30, title, ink)
	text(img, left, 50, fmt.Sprintf("%d CPUs, %s; %s", r.Machine.CPUs, r.Machine.Model, r.Date), ink)

	// Grid and y labels at each power of ten.
	for e := lo10; e <= hi10; e++ {
		yy := y(math.Pow(10, e))
		hline(img, left, left+plotW, yy, grid)
		label := compact(math.Pow(10, e))
		text(img, left-10-7*len(label), yy+4, label, ink)
	}
	vline(img, left, top, top+plotH, ink)
	hline(img, left, left+plotW, top+plotH, ink)
	text(img, 10, top-12, "records/s", ink)

	groups := len(r.Scenarios)
	if groups == 0 {
		return savePNG(path, img)
	}
	groupW := plotW / groups
	for gi, s := range r.Scenarios {
		x0 := left + gi*groupW
		if len(s.Scenario.Nodes) > 0 {
			// A scaling scenario: keyhook key once per node count, its
			// settled rate, in shades of keyhook key's colour.
			barW := (groupW - 20) / max(1, len(s.Runs))
			for i, run := range s.Runs {
				rate := run.Rate
				if run.Shared != nil && run.Shared.SettledRate > 0 {
					rate = run.Shared.SettledRate
				}
				bx := x0 + 10 + i*barW
				if rate <= 0 {
					continue
				}
				by := y(max(rate, math.Pow(10, lo10)))
				fill(img, image.Rect(bx+1, by, bx+barW-1, top+plotH), nodeShade(i, len(s.Runs)))
				label := compact(rate)
				text(img, bx+(barW-7*len(label))/2, by-4, label, ink)
				if run.Shared != nil {
					nl := fmt.Sprintf("%dn", run.Shared.Nodes)
					text(img, bx+(barW-7*len(nl))/2, top+plotH-6, nl, white)
				}
			}
			name := "S" + s.ID
			text(img, x0+(groupW-7*len(name))/2, top+plotH+20, name, ink)
			continue
		}
		// A group holds the contenders its scenario runs, in the
		// legend's order.
		cs := s.Scenario.Contenders
		if len(cs) == 0 { // results read back without their scenario
			cs = allContenders
		}
		n := len(cs)
		barW := (groupW - 20) / n
		for ci, c := range cs {
			run := s.run(c.Name)
			bx := x0 + 10 + ci*barW
			if run == nil || run.Rate <= 0 {
				continue
			}
			by := y(max(run.Rate, math.Pow(10, lo10)))
			fill(img, image.Rect(bx+1, by, bx+barW-1, top+plotH), contenderColors[c.Name])
			label := compact(run.Rate)
			text(img, bx+(barW-7*len(label))/2, by-4, label, ink)
		}
		name := "S" + s.ID
		text(img, x0+(groupW-7*len(name))/2, top+plotH+20, name, ink)
	}
	text(img, left, top+plotH+50, "S1 50 ms, 8 partitions | S2a slow key | S2b hot key | S3 0 ms endpoint | S4 1 partition | S5 one record failing | S6 1 partition shared by 1-4 nodes (keyhook key, settled rate)", ink)
	text(img, left, top+plotH+70, "serial contenders (baseline, keyhook partition) ran for a time cap; see results.md", ink)
	if note := othersNote(r); note != "" {
		text(img, left, top+plotH+85, note, ink)
	}

	// Legend.
	lx := left + plotW + 20
	for i, c := range allContenders {
		ly := top + 10 + i*24
		fill(img, image.Rect(lx, ly, lx+16, ly+16), contenderColors[c.Name])
		text(img, lx+24, ly+12, c.Name, ink)
	}
	return savePNG(path, img)
}

// nodeShade is the colour of the i-th of n node counts of a scaling
// scenario: keyhook key's blue, lighter for fewer nodes.
func nodeShade(i, n int) color.RGBA {
	base := contenderColors[cKey.Name]
	f := 0.45 + 0.55*float64(i+1)/float64(max(1, n))
	mix := func(c uint8) uint8 { return uint8(255 - f*float64(255-int(c))) }
	return color.RGBA{mix(base.R), mix(base.G), mix(base.B), 0xff}
}

// othersNote says how fast keyhook key delivered the other keys where a
// slow, hot or failing key stretches its overall window.
func othersNote(r *results) string {
	var parts []string
	for _, s := range r.Scenarios {
		sc := s.Scenario
		if sc.Data.Special == specialNone && sc.Sink.FailRecord < 0 {
			continue
		}
		if kh := s.run(cKey.Name); kh != nil && kh.OthersRate > 0 {
			parts = append(parts, fmt.Sprintf("S%s %s", s.ID, compact(kh.OthersRate)))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "keyhook key, the other keys' first 90% (rec/s): " + strings.Join(parts, ", ") + " - its bar spans the slow/hot/failing key too"
}

// compact writes a rate in at most five characters: 160, 1.2k, 18k, 1.2M.
func compact(v float64) string {
	switch {
	case v >= 1e6:
		return trimZero(fmt.Sprintf("%.1fM", v/1e6))
	case v >= 1e4:
		return fmt.Sprintf("%.0fk", v/1e3)
	case v >= 1e3:
		return trimZero(fmt.Sprintf("%.1fk", v/1e3))
	case v >= 10:
		return fmt.Sprintf("%.0f", v)
	default:
		return trimZero(fmt.Sprintf("%.1f", v))
	}
}

func trimZero(s string) string {
	for _, suffix := range []string{".0k", ".0M"} {
		if len(s) > len(suffix) && s[len(s)-len(suffix):] == suffix {
			return s[:len(s)-len(suffix)] + suffix[2:]
		}
	}
	if len(s) > 2 && s[len(s)-2:] == ".0" {
		return s[:len(s)-2]
	}
	return s
}

func text(img *image.RGBA, x, y int, s string, c color.Color) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func fill(img *image.RGBA, r image.Rectangle, c color.Color) {
	draw.Draw(img, r, image.NewUniform(c), image.Point{}, draw.Src)
}

func hline(img *image.RGBA, x0, x1, y int, c color.Color) {
	fill(img, image.Rect(x0, y, x1, y+1), c)
}

func vline(img *image.RGBA, x, y0, y1 int, c color.Color) {
	fill(img, image.Rect(x, y0, x+1, y1), c)
}

func savePNG(path string, img image.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: chart: %w", err)
	}
	if err := png.Encode(f, img); err != nil {
		_ = f.Close()
		return fmt.Errorf("bench: chart: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("bench: chart: %w", err)
	}
	return nil
}
