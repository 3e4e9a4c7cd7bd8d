package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/keyhook/keyhook/breaker"
	"github.com/keyhook/keyhook/webhooks"
)

// What an attempt says of its origin: only an origin that does not
// answer, or answers that it is failing, counts toward opening.
func TestVerdictCountsOnlyADownOrigin(t *testing.T) {
	for _, tt := range []struct {
		a    webhooks.Attempt
		want breaker.Verdict
	}{
		{webhooks.Attempt{Status: http.StatusOK}, breaker.Success},
		{webhooks.Attempt{Status: http.StatusBadRequest}, breaker.Success},
		{webhooks.Attempt{Status: http.StatusTooManyRequests}, breaker.Neutral},
		{webhooks.Attempt{Status: http.StatusServiceUnavailable}, breaker.Failure},
		{webhooks.Attempt{Status: http.StatusRequestTimeout}, breaker.Failure},
		{webhooks.Attempt{Err: context.DeadlineExceeded}, breaker.Failure},
		{webhooks.Attempt{Err: errors.New("dial tcp: connection refused")}, breaker.Failure},
		{webhooks.Attempt{Err: context.Canceled}, breaker.Neutral},
		{webhooks.Attempt{Err: fmt.Errorf("x: %w", webhooks.ErrInvalidURL)}, breaker.Neutral},
	} {
		if got, _ := verdict(tt.a); got != tt.want {
			t.Errorf("verdict(status %d, err %v) = %v, want %v", tt.a.Status, tt.a.Err, got, tt.want)
		}
	}
}
