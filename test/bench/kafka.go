package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkaBrokersEnv names a real broker to use instead of kfake; the
// integration tier of scripts/test.sh sets it.
const kafkaBrokersEnv = "KEYHOOK_TEST_KAFKA_BROKERS"

// kafkaEnv is the Kafka every contender reads from.
type kafkaEnv struct {
	brokers []string
	cluster *kfake.Cluster // nil on a real broker
	adm     *kadm.Client
	admCl   *kgo.Client
	// topics are created by this run and deleted at close on a real
	// broker (kfake forgets them on its own).
	topics []string
}

// startKafka starts kfake in this process, or connects to the broker of
// KEYHOOK_TEST_KAFKA_BROKERS when it is set.
func startKafka() (*kafkaEnv, error) {
	k := &kafkaEnv{}
	for b := range strings.SplitSeq(os.Getenv(kafkaBrokersEnv), ",") {
		if b = strings.TrimSpace(b); b != "" {
			k.brokers = append(k.brokers, b)
		}
	}
	if len(k.brokers) == 0 {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(1))
		if err != nil {
			return nil, fmt.Errorf("bench: start kfake: %w", err)
		}
		k.cluster, k.brokers = c, c.ListenAddrs()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.brokers...))
	if err != nil {
		k.close()
		return nil, fmt.Errorf("bench: kafka admin client: %w", err)
	}
	k.admCl, k.adm = cl, kadm.NewClient(cl)
	return k, nil
}

// describe names the Kafka for the report.
func (k *kafkaEnv) describe() string {
	if k.cluster != nil {
		return "kfake (franz-go's in-process Kafka), 1 broker"
	}
	return "real broker " + strings.Join(k.brokers, ",") + " (" + kafkaBrokersEnv + ")"
}

// createTopic creates a topic and waits until every partition has a
// leader.
func (k *kafkaEnv) createTopic(ctx context.Context, name string, partitions int32) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := k.adm.CreateTopics(ctx, partitions, 1, nil, name)
	if err != nil {
		return fmt.Errorf("bench: create topic %s: %w", name, err)
	}
	for _, r := range resp {
		if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("bench: create topic %s: %w", name, r.Err)
		}
	}
	k.topics = append(k.topics, name)
	for {
		md, err := k.adm.Metadata(ctx, name)
		if err == nil {
			if t, ok := md.Topics[name]; ok && t.Err == nil && len(t.Partitions) == int(partitions) {
				ready := true
				for _, p := range t.Partitions {
					if p.Leader < 0 || p.Err != nil {
						ready = false
					}
				}
				if ready {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: topic %s has no leaders: %w", name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// close deletes the topics this run created on a real broker and stops
// kfake.
func (k *kafkaEnv) close() {
	if k.adm != nil && k.cluster == nil && len(k.topics) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, _ = k.adm.DeleteTopics(ctx, k.topics...)
		cancel()
	}
	if k.admCl != nil {
		k.admCl.Close()
	}
	if k.cluster != nil {
		k.cluster.Close()
	}
}

// producer writes a dataset's records, keyed, each stamped with the time
// it is produced (in the record and in its body).
type producer struct {
	cl    *kgo.Client
	data  *dataset
	topic string

	mu  sync.Mutex
	err error
}

func newProducer(brokers []string, topic string, d *dataset, linger time.Duration) (*producer, error) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.DefaultProduceTopic(topic),
		kgo.ProducerLinger(linger),
		kgo.MaxBufferedRecords(50000),
		kgo.ProducerBatchMaxBytes(1<<20),
	)
	if err != nil {
		return nil, fmt.Errorf("bench: producer: %w", err)
	}
	return &producer{cl: cl, data: d, topic: topic}, nil
}

// produce sends record id; it blocks only when the buffer is full.
func (p *producer) produce(ctx context.Context, id int) {
	ts := time.Now()
	r := &kgo.Record{Key: p.data.keyName(p.data.key[id]), Value: p.data.body(id, ts), Timestamp: ts}
	p.cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
		if err != nil {
			p.mu.Lock()
			if p.err == nil {
				p.err = err
			}
			p.mu.Unlock()
		}
	})
}

// finish flushes what is buffered, closes the client and returns the
// first produce error.
func (p *producer) finish(ctx context.Context) error {
	ferr := p.cl.Flush(ctx)
	p.cl.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return fmt.Errorf("bench: produce to %s: %w", p.topic, p.err)
	}
	if ferr != nil {
		return fmt.Errorf("bench: flush to %s: %w", p.topic, ferr)
	}
	return nil
}

// preload writes every record of d before a contender starts.
func preload(ctx context.Context, brokers []string, topic string, d *dataset) error {
	p, err := newProducer(brokers, topic, d, 5*time.Millisecond)
	if err != nil {
		return err
	}
	for id := range d.spec.Records {
		p.produce(ctx, id)
	}
	return p.finish(ctx)
}
