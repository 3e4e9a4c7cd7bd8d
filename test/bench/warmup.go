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
	const topic, partitions = "bench-warmup", 8
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := k.createTopic(ctx, topic, partitions); err != nil {
		return err
	}
	fmt.Fprintf(progress, "warming the broker up: %d records written and read back\n", warmRecords)
	start := time.Now()
	if err := k.warm(ctx, topic, partitions); err != nil {
		return err
	}
	k.warmed = time.Since(start)
	// Its records need not stay on the broker's disk and in its page cache
	// while the contenders run.
	if _, err := k.adm.DeleteTopics(ctx, topic); err != nil {
		return fmt.Errorf("bench: delete %s: %w", topic, err)
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
	for reader.polled() < warmRecords {
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: warm-up read %d of %d records: %w", reader.polled(), warmRecords, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}
