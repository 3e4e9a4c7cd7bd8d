// Package demo is the traffic of "keyhook dev": an endpoint that answers
// slowly for one key and a producer writing keyed records. It exists so a
// newcomer sees key-level concurrency work; nothing in production uses it.
package demo

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// SlowKey is the key the demo endpoint answers slowly.
const SlowKey = "customer-slow"

// Endpoint is an HTTP handler that accepts every delivery, taking Slow for
// records of SlowKey and Fast for the others.
type Endpoint struct {
	Fast, Slow time.Duration
	received   atomic.Int64
	slow       atomic.Int64
}

// ServeHTTP answers one delivery.
func (e *Endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d := e.Fast
	if r.Header.Get("Keyhook-Key") == SlowKey {
		d = e.Slow
		e.slow.Add(1)
	}
	select {
	case <-time.After(d):
	case <-r.Context().Done():
		return
	}
	e.received.Add(1)
	w.WriteHeader(http.StatusNoContent)
}

// Received counts the deliveries answered, and those of the slow key.
func (e *Endpoint) Received() (all, slow int64) { return e.received.Load(), e.slow.Load() }

// Produce writes records with keys customer-1..keys and SlowKey to topic at
// about rate records per second until ctx ends.
func Produce(ctx context.Context, cl *kgo.Client, topic string, keys int, rate int) error {
	t := time.NewTicker(time.Second / time.Duration(rate))
	defer t.Stop()
	for seq := 0; ; seq++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		key := fmt.Sprintf("customer-%d", seq%keys+1)
		if seq%(keys+1) == keys {
			key = SlowKey
		}
		rec := &kgo.Record{
			Topic:   topic,
			Key:     []byte(key),
			Value:   fmt.Appendf(nil, `{"customer":%q,"seq":%d}`, key, seq),
			Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/json")}},
		}
		cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			// A failed demo write is only a missing demo record.
			_ = err
		})
	}
}
