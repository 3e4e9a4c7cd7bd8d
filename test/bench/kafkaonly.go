package main

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkaOnly reads a topic as keyhook's consumer does (read committed, the
// same fetch wait) and delivers nothing: when it polled each record is
// Kafka's share of the latency, the producer and the broker included,
// measured under the same load at the same time. Like ceiling B it assigns
// the partitions itself, so it reads from the first record with no group
// to join.
type kafkaOnly struct {
	cl *kgo.Client
	// lat is, per record id, poll time minus the record's timestamp in ns;
	// 0 until polled.
	lat  []atomic.Int64
	done chan struct{}
}

func startKafkaOnly(ctx context.Context, brokers []string, topic string, partitions int32, records int) (*kafkaOnly, error) {
	parts := make(map[int32]kgo.Offset, partitions)
	for _, p := range allPartitions(int(partitions)) {
		parts[p] = kgo.NewOffset().AtStart()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("bench: kafka-only consumer: %w", err)
	}
	k := &kafkaOnly{cl: cl, lat: make([]atomic.Int64, records), done: make(chan struct{})}
	go func() {
		defer close(k.done)
		for {
			fs := cl.PollFetches(ctx)
			if fs.IsClientClosed() || ctx.Err() != nil {
				return
			}
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) {
				if b, err := parseBody(r.Value); err == nil && int(b.id) < records {
					k.lat[b.id].CompareAndSwap(0, max(1, now.Sub(r.Timestamp).Nanoseconds()))
				}
			})
		}
	}()
	return k, nil
}

// polled counts the records polled so far.
func (k *kafkaOnly) polled() int {
	n := 0
	for i := range k.lat {
		if k.lat[i].Load() > 0 {
			n++
		}
	}
	return n
}

// waitPolled returns once n records were polled, or with an error naming
// what when ctx ends first.
func (k *kafkaOnly) waitPolled(ctx context.Context, n int, what string) error {
	for k.polled() < n {
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: %s read %d of %d records: %w", what, k.polled(), n, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

func (k *kafkaOnly) stop() {
	k.cl.Close()
	<-k.done
}

// percentiles returns the p50 and p99 in ms of records from..len-1,
// notMeasured when none was polled.
func (k *kafkaOnly) percentiles(from int) (p50, p99 float64) {
	var lat []int64
	for i := from; i < len(k.lat); i++ {
		if v := k.lat[i].Load(); v > 0 {
			lat = append(lat, v)
		}
	}
	if len(lat) == 0 {
		return notMeasured, notMeasured
	}
	slices.Sort(lat)
	return float64(percentile(lat, 0.50)) / 1e6, float64(percentile(lat, 0.99)) / 1e6
}
