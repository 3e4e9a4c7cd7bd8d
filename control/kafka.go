package control

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/keyhook/keyhook/internal/backoff"
	"github.com/keyhook/keyhook/subscription"
)

// unavailableWait bounds how long an operator action waits for Kafka to
// answer (a group coordinator being elected on a fresh cluster, a broker
// restarting) before it reports subscription.ErrUnavailable.
const unavailableWait = 10 * time.Second

// kafkaCall runs call until it succeeds, fails for good, or Kafka stays
// unavailable for unavailableWait: a transient error is tried again with
// backoff, then reported wrapping subscription.ErrUnavailable so the API
// answers 503 rather than 500. A topic or group that does not exist is
// not transient here: callers decide what it means.
func kafkaCall[T any](ctx context.Context, call func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, unavailableWait)
	defer cancel()
	bo := backoff.MustNew(backoff.Config{Initial: 100 * time.Millisecond, Max: time.Second})
	for {
		v, err := call(ctx)
		if err == nil || !transient(err) {
			return v, err
		}
		if werr := bo.Wait(ctx, 0); werr != nil {
			return v, fmt.Errorf("%w: %w", subscription.ErrUnavailable, err)
		}
	}
}

// transient reports whether err says Kafka may answer if asked again.
func transient(err error) bool {
	switch {
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.GroupIDNotFound):
		return false
	case kerr.IsRetriable(err):
		return true
	}
	var nerr net.Error
	return errors.As(err, &nerr)
}
