package delivery

import "time"

// SetClockForTest makes e read the time from now.
func SetClockForTest(e *Endpoint, now func() time.Time) { e.now = now }
