package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/dispatcher"
	"github.com/keyhook/keyhook/webhooks"
)

// runCeilingA posts every record of the dataset with the webhooks.Client
// keyhook uses, built the way keyhook builds a delivery (raw format,
// keyhook headers, signed), max_in_flight at a time, without Kafka or
// Redis: what the machine allows for the HTTP part alone.
func runCeilingA(ctx context.Context, spec childSpec, out *childOut, rep *childReport) error {
	sub, err := benchSubscription(spec)
	if err != nil {
		return err
	}
	client, err := newWebhookClient(spec)
	if err != nil {
		return err
	}
	defer client.CloseIdleConnections()
	policy := sub.Retry.Policy(webhooks.RetryPolicy{})
	d := newDataset(spec.Data)
	signer := sub.Signer(time.Now())

	smp := startSampler(ctx, spec.SampleEvery, nil)
	out.line(lineReady)
	ids := make(chan int)
	var wg sync.WaitGroup
	for range spec.MaxInFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range ids {
				now := time.Now()
				partition, offset := "0", strconv.Itoa(id)
				m := &webhooks.Message{
					ID:      dispatcher.DeliveryID(sub.ID, spec.Topic, 0, int64(id)),
					Key:     d.keyName(d.key[id]),
					Value:   d.body(id, now),
					Time:    now,
					Source:  "kafka://" + spec.Topic,
					Subject: partition + "/" + offset,
					Attributes: []webhooks.Attr{
						{Name: "subscription", Value: sub.ID}, {Name: "topic", Value: spec.Topic},
						{Name: "partition", Value: partition}, {Name: "offset", Value: offset},
					},
				}
				req, err := webhooks.NewRequest(sub.Endpoint.URL, webhooks.Format(sub.Format), m, sub.CloudEventsType)
				if err != nil {
					continue
				}
				req.Signer = signer
				client.Deliver(ctx, req, policy, nil)
			}
		}()
	}
feed:
	for id := range d.spec.Records {
		select {
		case ids <- id:
		case <-ctx.Done():
			break feed
		}
	}
	close(ids)
	wg.Wait()
	out.line(lineDone)
	<-ctx.Done()
	rep.Samples = smp.wait(nil)
	return nil
}

// runCeilingB reads every record of the topic and does nothing with them:
// the consumption rate without HTTP or Redis. It assigns the partitions
// directly (no group join to wait for) and times from its first fetch
// request to the last record.
func runCeilingB(ctx context.Context, spec childSpec, out *childOut, rep *childReport) error {
	parts := make(map[int32]kgo.Offset, spec.Partitions)
	for _, p := range allPartitions(spec.Partitions) {
		parts[p] = kgo.NewOffset().AtStart()
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(spec.Brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{spec.Topic: parts}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	if err != nil {
		return fmt.Errorf("bench: ceiling B client: %w", err)
	}
	defer cl.Close()
	smp := startSampler(ctx, spec.SampleEvery, nil)
	out.line(lineReady)
	want := int64(spec.Data.Records)
	rep.FirstAt = time.Now().UnixNano()
	for rep.Consumed < want {
		fetches := cl.PollRecords(ctx, 10000)
		if fetches.IsClientClosed() || ctx.Err() != nil {
			break
		}
		if n := int64(fetches.NumRecords()); n > 0 {
			rep.Consumed += n
			rep.LastAt = time.Now().UnixNano()
		}
	}
	if rep.Consumed >= want {
		out.line(lineDone)
	}
	<-ctx.Done()
	rep.Samples = smp.wait(nil)
	return nil
}
