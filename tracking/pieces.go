package tracking

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/keyhook/keyhook/keyrange"
)

// piece is one entry of the pieces field (see libLua in scripts.go): the
// hashes [lo, hi), the epoch of the claim they belong to (0: never
// claimed), whether that claim released them, and what is known of them.
type piece struct {
	lo, hi    uint32
	epoch     int64
	released  bool
	watermark int64
}

// unclaimed is the pieces of a partition nobody claimed yet.
func unclaimed() []piece {
	return []piece{{lo: 0, hi: keyrange.Space, watermark: -1}}
}

// parsePieces reads the pieces field, refusing anything that does not
// cover the hash space exactly, in order.
func parsePieces(s string) ([]piece, error) {
	var ps []piece
	var next uint32
	for part := range strings.SplitSeq(s, ",") {
		f := strings.Split(part, ":")
		if len(f) != 5 {
			return nil, fmt.Errorf("piece %q: want lo:hi:epoch:released:watermark", part)
		}
		lo, err1 := strconv.ParseUint(f[0], 10, 32)
		hi, err2 := strconv.ParseUint(f[1], 10, 32)
		epoch, err3 := strconv.ParseInt(f[2], 10, 64)
		wm, err4 := strconv.ParseInt(f[4], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || err4 != nil || (f[3] != "0" && f[3] != "1") {
			return nil, fmt.Errorf("piece %q: bad number", part)
		}
		if uint32(lo) != next || hi <= lo || hi > keyrange.Space {
			return nil, fmt.Errorf("piece %q: does not follow %d", part, next)
		}
		next = uint32(hi)
		ps = append(ps, piece{lo: uint32(lo), hi: uint32(hi), epoch: epoch, released: f[3] == "1", watermark: wm})
	}
	if next != keyrange.Space {
		return nil, fmt.Errorf("pieces end at %d, not %d", next, keyrange.Space)
	}
	return ps, nil
}

// mergedWatermark is the least watermark of ps: every record below it
// was delivered, whatever its hash.
func mergedWatermark(ps []piece) int64 {
	wm := ps[0].watermark
	for _, p := range ps[1:] {
		wm = min(wm, p.watermark)
	}
	return wm
}

// held is the hashes of the unreleased pieces of epoch's claim.
func held(ps []piece, epoch int64) keyrange.Set {
	var rs []keyrange.Range
	for _, p := range ps {
		if p.epoch == epoch && !p.released {
			rs = append(rs, keyrange.Range{Lo: p.lo, Hi: p.hi})
		}
	}
	s, _ := keyrange.NewSet(rs...) // pieces were validated
	return s
}
