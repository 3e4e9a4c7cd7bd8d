package main

import (
	"context"
	"fmt"
	"io"
	"time"
)

// warmRecords is how many records the warm-up writes and reads back, as
// many as scenario 3 gives each contender (2–3 s on 2 cores).
const warmRecords = 300_000

// The warm-up's second part produces as the paced run does, small
// batches at a steady rate, for warmPacedFor. A broker that had only
// drained large batches spent ~45% of the two cores on the paced run's
// first tens of seconds (Kafka alone p99 56–122 ms on the first two runs
// of a fresh broker, 18–52 ms from the third): the paths of small produce
// requests and of fetches that wait for them are other code than those
// of a drain, compiled only once they run.
const (
	warmPacedRate = 8_000
	warmPacedFor  = 45 * time.Second
)

// warmUp runs records through a broker this run started before any
// contender is measured. A just-started JVM interprets its hot paths
// until the JIT has compiled them: without this the first contender of
// scenario 1 (keyhook key, after the serial baseline, which barely loads
// the broker) read from a colder broker than those after it. It writes a
// topic of its own at full speed while a consumer with the contenders'
// fetch settings reads it; describe then says so.
func (k *kafkaEnv) warmUp(ctx context.Context, progress io.Writer) error {
	if k.private == nil {
		return nil
	}
	const topic, pacedTopic, partitions = "bench-warmup", "bench-warmup-paced", 8
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := k.createTopic(ctx, topic, partitions); err != nil {
		return err
	}
	fmt.Fprintf(progress, "warming the broker up: %d records written and read back, then %v at %d records/s\n", warmRecords, warmPacedFor, warmPacedRate)
	start := time.Now()
	if err := k.warm(ctx, topic, partitions); err != nil {
		return err
	}
	k.warmed = time.Since(start)
	if err := k.createTopic(ctx, pacedTopic, partitions); err != nil {
		return err
	}
	if err := k.warmPaced(ctx, pacedTopic, partitions); err != nil {
		return err
	}
	// Its records need not stay on the broker's disk and in its page cache
	// while the contenders run.
	if _, err := k.adm.DeleteTopics(ctx, topic, pacedTopic); err != nil {
		return fmt.Errorf("bench: delete the warm-up's topics: %w", err)
	}
	return nil
}

// warm writes warmRecords to topic while a reader reads them, and returns
// once it has read them all.
func (k *kafkaEnv) warm(ctx context.Context, topic string, partitions int32) error {
	d := newDataset(dataSpec{Records: warmRecords, Keys: 10_000, ValueBytes: 256, Seed: 7})
	reader, err := startKafkaOnly(ctx, k.brokers, topic, partitions, warmRecords)
	if err != nil {
		return err
	}
	defer reader.stop()
	p, err := newProducer(k.brokers, topic, d, 5*time.Millisecond)
	if err != nil {
		return err
	}
	for id := range warmRecords {
		p.produce(ctx, id)
	}
	if err := p.finish(ctx); err != nil {
		return err
	}
	return reader.waitPolled(ctx, warmRecords, "warm-up")
}

// warmPaced produces warmPacedRate records a second to topic, as the
// paced run does (linger 1 ms, a tick every 2 ms), for warmPacedFor while
// a reader with the contenders' fetch settings reads them, and returns
// once it has read them all.
func (k *kafkaEnv) warmPaced(ctx context.Context, topic string, partitions int32) error {
	n := int(warmPacedRate * warmPacedFor.Seconds())
	d := newDataset(dataSpec{Records: n, Keys: 10_000, ValueBytes: 256, Seed: 8})
	reader, err := startKafkaOnly(ctx, k.brokers, topic, partitions, n)
	if err != nil {
		return err
	}
	defer reader.stop()
	p, err := newProducer(k.brokers, topic, d, time.Millisecond)
	if err != nil {
		return err
	}
	// A context that ends stops the producing; finish then closes the
	// producer and says why.
	k.warmedPaced = p.produceAtRate(ctx, n, warmPacedRate)
	if err := p.finish(ctx); err != nil {
		return err
	}
	return reader.waitPolled(ctx, n, "paced warm-up")
}
