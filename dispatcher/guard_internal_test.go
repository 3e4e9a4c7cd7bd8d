package dispatcher

import (
	"testing"
	"time"
)

// The guard reads every pending record's time, so it runs no more often
// than its margin needs: a tenth of the margin, between 1 s and 30 s.
func TestRetentionGuardRunsAsOftenAsItsMarginNeeds(t *testing.T) {
	for _, tc := range []struct {
		retention, want time.Duration
	}{
		{20 * time.Second, time.Second},        // margin 5 s
		{2 * time.Minute, 3 * time.Second},     // margin 30 s
		{time.Hour, 30 * time.Second},          // margin 15 min
		{7 * 24 * time.Hour, 30 * time.Second}, // margin 6 h
		{time.Second, time.Second},             // margin 250 ms
	} {
		if got := guardInterval(tc.retention); got != tc.want {
			t.Errorf("guardInterval(%v) = %v, want %v", tc.retention, got, tc.want)
		}
	}
}
