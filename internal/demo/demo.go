// Package demo is the traffic of "keyhook dev": an endpoint that answers
// slowly for one key, a producer writing keyed records, and one writing
// Avro orders in the Confluent wire format. It exists so a newcomer sees
// key-level concurrency and decoding work; nothing in production uses it.
package demo

import (
	"context"
	"fmt"
	"math/big"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
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
	return paced(ctx, rate, func(seq int) error {
		key := fmt.Sprintf("customer-%d", seq%keys+1)
		if seq%(keys+1) == keys {
			key = SlowKey
		}
		produce(ctx, cl, &kgo.Record{
			Topic:   topic,
			Key:     []byte(key),
			Value:   fmt.Appendf(nil, `{"customer":%q,"seq":%d}`, key, seq),
			Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/json")}},
		})
		return nil
	})
}

// paced calls write with 0, 1, 2… at about rate calls per second until
// ctx ends (nil) or write fails.
func paced(ctx context.Context, rate int, write func(seq int) error) error {
	t := time.NewTicker(time.Second / time.Duration(rate))
	defer t.Stop()
	for seq := 0; ; seq++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := write(seq); err != nil {
			return err
		}
	}
}

// produce writes rec without waiting: a failed demo write is only a
// missing demo record.
func produce(ctx context.Context, cl *kgo.Client, rec *kgo.Record) {
	cl.Produce(ctx, rec, func(*kgo.Record, error) {})
}

// OrderSchema is the Avro schema of the records ProduceAvro writes.
const OrderSchema = `{"type":"record","name":"Order","namespace":"demo","fields":[
	{"name":"order_id","type":"string"},
	{"name":"customer","type":"string"},
	{"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","PAID","SHIPPED"]}},
	{"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},
	{"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
	{"name":"note","type":["null","string"],"default":null}]}`

// ProduceAvro writes orders in Avro, in the Confluent wire format under
// schemaID (OrderSchema's id in the registry), with keys
// customer-1..keys, to topic at about rate records per second until ctx
// ends. Their status cycles NEW, PAID, SHIPPED.
func ProduceAvro(ctx context.Context, cl *kgo.Client, topic string, schemaID, keys, rate int) error {
	schema, err := avro.Parse(OrderSchema)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	var h sr.ConfluentHeader
	return paced(ctx, rate, func(seq int) error {
		key := fmt.Sprintf("customer-%d", seq%keys+1)
		order := map[string]any{
			"order_id": fmt.Sprintf("o-%d", seq), "customer": key,
			"status": []string{"NEW", "PAID", "SHIPPED"}[seq%3],
			"amount": big.NewRat(int64(1000+seq%9000), 100), "at": time.Now(),
			"note": nil,
		}
		b, err := avro.Marshal(schema, order)
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		value, _ := h.AppendEncode(nil, schemaID, nil) // never fails
		produce(ctx, cl, &kgo.Record{Topic: topic, Key: []byte(key), Value: append(value, b...)})
		return nil
	})
}
