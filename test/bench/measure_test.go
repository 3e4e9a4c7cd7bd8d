package main

import (
	"math"
	"testing"
)

// The sink's open requests are what rate ÷ ideal splits into: each record
// answered in the window counts from reading it to answering, clipped to
// the window, and by tenth where it was open.
func TestOpenAtSinkCountsEachAnsweredRequestWhereItWasOpen(t *testing.T) {
	// done and service per record, in ns; 0 done = never answered.
	type rec struct{ done, service int64 }
	cases := []struct {
		name       string
		recs       []rec
		start, end int64
		open, svc  float64
		tenths     []float64
	}{
		{
			name:  "one request over the whole window",
			recs:  []rec{{done: 100, service: 100}},
			start: 0, end: 100,
			open: 1, svc: 100e-6,
			tenths: []float64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
		},
		{
			name:  "two overlapping, one answered after the window, one never",
			recs:  []rec{{done: 50, service: 50}, {done: 100, service: 60}, {done: 150, service: 100}, {}},
			start: 0, end: 100,
			open: 1.1, svc: 55e-6,
			tenths: []float64{1, 1, 1, 1, 2, 1, 1, 1, 1, 1},
		},
		{
			name:  "a request read before the window starts is clipped to it",
			recs:  []rec{{done: 20, service: 40}},
			start: 10, end: 110,
			open: 0.1, svc: 40e-6,
			tenths: []float64{1, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			run := newSinkRun(&dataset{spec: dataSpec{Records: len(c.recs), Keys: 1}}, sinkSpec{}, false)
			for i, r := range c.recs {
				run.firstOK[i].Store(r.done)
				run.service[i].Store(r.service)
			}
			var r runResult
			r.open(run, c.start, c.end)
			if math.Abs(r.SinkOpen-c.open) > 1e-9 || math.Abs(r.SinkServiceMS-c.svc) > 1e-12 {
				t.Fatalf("open %v, service %v ms; want %v, %v", r.SinkOpen, r.SinkServiceMS, c.open, c.svc)
			}
			for i := range c.tenths {
				if math.Abs(r.SinkOpenByTenth[i]-c.tenths[i]) > 1e-9 {
					t.Fatalf("by tenth %v, want %v", r.SinkOpenByTenth, c.tenths)
				}
			}
		})
	}
}
