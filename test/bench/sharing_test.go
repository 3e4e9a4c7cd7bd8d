package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSettledAtIsWhenEveryNodeTookItsFinalShare: a scaling run's settled
// rate starts once every node's key hashes stopped changing, and only
// when their final shares cover the hash space exactly once.
func TestSettledAtIsWhenEveryNodeTookItsFinalShare(t *testing.T) {
	s := func(pairs ...int64) []sample {
		var out []sample
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, sample{T: pairs[i], KeyHashes: pairs[i+1]})
		}
		return out
	}
	tests := []struct {
		name       string
		samples    [][]sample
		wantAt     int64
		wantHashes []int64
	}{
		{"one node, whole from the start", [][]sample{s(1, 65536, 2, 65536)}, 1, []int64{65536}},
		{"one node, claims late", [][]sample{s(1, 0, 2, 0, 3, 65536)}, 3, []int64{65536}},
		{"two nodes, the first shrinks, the second grows later",
			[][]sample{s(1, 65536, 5, 32768, 9, 32768), s(2, 0, 6, 0, 7, 32768, 9, 32768)}, 7, []int64{32768, 32768}},
		{"never covering the space", [][]sample{s(1, 65536, 5, 32768), s(2, 0, 6, 0)}, 0, []int64{32768, 0}},
		{"a node without samples", [][]sample{s(1, 65536), nil}, 0, []int64{65536, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			at, hashes := settledAt(tt.samples)
			if at != tt.wantAt {
				t.Errorf("settled at %d, want %d", at, tt.wantAt)
			}
			if diff := cmp.Diff(tt.wantHashes, hashes); diff != "" {
				t.Errorf("key hashes (-want +got):\n%s", diff)
			}
		})
	}
}
