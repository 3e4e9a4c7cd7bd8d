package tracking

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/keyrange"
)

// piecesCheckCmd runs the scripts' own parsepieces, encodepieces and held
// over ARGV[1], the pieces field, for claim ARGV[2].
var piecesCheckCmd = newScript(`
local ps = parsepieces(ARGV[1])
return {encodepieces(ps), held(ps, ARGV[2])}
`)

// The pieces field is written by the scripts (Lua) and read by Load (Go):
// both must read the same pieces from it, and the scripts' held must say
// what keyrange.Set.String says, since flush compares it with the ranges
// Go sends. Each seed draws a random list of pieces, neighbours alike
// included, epochs and watermarks as large as they get.
func FuzzPiecesEncodingIsTheSameInLuaAndGo(f *testing.F) {
	for seed := range uint64(64) {
		f.Add(seed)
	}
	rdb := testutil.StartRedis(f).Client()
	f.Fuzz(func(t *testing.T, seed uint64) {
		ps := randomPieces(rand.New(rand.NewPCG(seed, seed>>1)))
		field := formatPieces(ps)
		got, err := parsePieces(field)
		if err != nil {
			t.Fatalf("Go cannot read %q: %v", field, err)
		}
		if diff := cmp.Diff(ps, got, cmp.AllowUnexported(piece{})); diff != "" {
			t.Fatalf("Go read of %q (-want +got):\n%s", field, diff)
		}
		for _, p := range append(ps, piece{epoch: 12345}) { // and a claim holding nothing
			res, err := piecesCheckCmd.Run(context.Background(), rdb, nil, field, fmt.Sprint(p.epoch)).StringSlice()
			if err != nil {
				t.Fatalf("script over %q: %v", field, err)
			}
			lua, err := parsePieces(res[0])
			if err != nil {
				t.Fatalf("Go cannot read the scripts' encoding %q of %q: %v", res[0], field, err)
			}
			if diff := cmp.Diff(mergedPieces(ps), lua, cmp.AllowUnexported(piece{})); diff != "" {
				t.Fatalf("the scripts' encoding of %q, read by Go (-want +got):\n%s", field, diff)
			}
			if want := held(ps, p.epoch).String(); res[1] != want {
				t.Fatalf("held(%q, %d) = %q in the scripts, %q in Go", field, p.epoch, res[1], want)
			}
		}
	})
}

// randomPieces cuts the hash space into up to 12 pieces of a few epochs.
func randomPieces(r *rand.Rand) []piece {
	epochs := []int64{0, 1_700_000_000_000_000, 1_700_000_000_000_001, 1<<53 - 1}
	watermarks := []int64{-1, 0, 41, 1<<53 - 1}
	cuts := map[uint32]bool{}
	for range r.IntN(12) {
		cuts[1+uint32(r.IntN(keyrange.Space-1))] = true
	}
	var ps []piece
	var lo uint32
	for hi := uint32(1); hi <= keyrange.Space; hi++ {
		if cuts[hi] || hi == keyrange.Space {
			ps = append(ps, piece{lo: lo, hi: hi, epoch: epochs[r.IntN(len(epochs))], released: r.IntN(2) == 1,
				watermark: watermarks[r.IntN(len(watermarks))]})
			lo = hi
		}
	}
	return ps
}

// formatPieces writes ps as the pieces field, neighbours alike kept apart.
func formatPieces(ps []piece) string {
	out := make([]string, len(ps))
	for i, p := range ps {
		rel := 0
		if p.released {
			rel = 1
		}
		out[i] = fmt.Sprintf("%d:%d:%d:%d:%d", p.lo, p.hi, p.epoch, rel, p.watermark)
	}
	return strings.Join(out, ",")
}

// mergedPieces joins the neighbours of ps that differ only in their
// bounds, as the scripts store them.
func mergedPieces(ps []piece) []piece {
	var out []piece
	for _, p := range ps {
		if n := len(out); n > 0 && out[n-1].epoch == p.epoch && out[n-1].released == p.released && out[n-1].watermark == p.watermark {
			out[n-1].hi = p.hi
			continue
		}
		out = append(out, p)
	}
	return out
}
