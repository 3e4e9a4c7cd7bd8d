package http1

import "testing"

// The idle check of a TLS connection trusts the TLS layer to hold
// nothing only at a record boundary: bytes of a record read in part
// could be completed by the next read into someone else's answer.
func TestTheRecordFramingKnowsAPartlyReadRecord(t *testing.T) {
	// Two records: 3 bytes of body, then 2; their headers' last two
	// bytes are the lengths.
	stream := []byte{23, 3, 3, 0, 3, 'a', 'b', 'c', 23, 3, 3, 0, 2, 'd', 'e'}
	for cut := 0; cut <= len(stream); cut++ {
		for split := 0; split <= cut; split++ {
			var r recordReader
			r.follow(stream[:split])
			r.follow(stream[split:cut])
			want := cut == 0 || cut == 8 || cut == len(stream)
			if got := r.atBoundary(); got != want {
				t.Errorf("after %d bytes (read as %d, then %d): at a boundary %v, want %v", cut, split, cut-split, got, want)
			}
		}
	}
}
