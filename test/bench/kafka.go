package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkaBrokersEnv names a real broker to use instead of kfake; the
// integration tier of scripts/test.sh sets it.
const kafkaBrokersEnv = "KEYHOOK_TEST_KAFKA_BROKERS"

// The -kafka choices.
const (
	// kafkaAuto: the broker of KEYHOOK_TEST_KAFKA_BROKERS when set, else a
	// real broker the bench starts when java and mvn are on PATH (not for
	// -quick), else kfake.
	kafkaAuto = "auto"
	// kafkaFake: kfake, whatever the machine has (the environment's broker
	// still wins).
	kafkaFake = "kfake"
	// kafkaReal: a real broker, the environment's or one the bench starts;
	// an error without java and mvn.
	kafkaReal = "real"
)

// kafkaEnv is the Kafka every contender reads from.
type kafkaEnv struct {
	brokers []string
	cluster *kfake.Cluster // nil on a real broker
	// private is the broker this run started (scripts/kafka.sh), stopped
	// at close; nil otherwise.
	private *privateBroker
	adm     *kadm.Client
	admCl   *kgo.Client
	// topics are created by this run and deleted at close on a real
	// broker (kfake forgets them on its own).
	topics []string
	// warmed is how long warmUp took, 0 when it did not run.
	warmed time.Duration
	// warmedPaced is how long warmUp's paced part took.
	warmedPaced time.Duration
}

// startKafka connects to the broker of KEYHOOK_TEST_KAFKA_BROKERS when it
// is set; otherwise it starts a real broker or kfake, as mode and the
// machine say (see kafkaAuto). The Parallel Consumer needs a real broker:
// the Java client refuses kfake.
func startKafka(mode string, quick bool, progress io.Writer) (*kafkaEnv, error) {
	k := &kafkaEnv{}
	for b := range strings.SplitSeq(os.Getenv(kafkaBrokersEnv), ",") {
		if b = strings.TrimSpace(b); b != "" {
			k.brokers = append(k.brokers, b)
		}
	}
	if len(k.brokers) == 0 && (mode == kafkaReal || mode == kafkaAuto && !quick && haveJava()) {
		if !haveJava() {
			return nil, errors.New("bench: -kafka real needs java and mvn on PATH (scripts/kafka.sh fetches Kafka from Maven Central), or " + kafkaBrokersEnv)
		}
		fmt.Fprintln(progress, "starting a real Kafka broker (scripts/kafka.sh; -kafka kfake skips it)")
		pb, err := startPrivateBroker()
		if err != nil {
			return nil, err
		}
		k.private, k.brokers = pb, pb.brokers
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
	switch {
	case k.cluster != nil:
		return "kfake (franz-go's in-process Kafka), 1 broker"
	case k.private != nil && k.warmed > 0:
		return fmt.Sprintf("%s, a single KRaft node the bench started (scripts/kafka.sh; %s heap, JVM settings of Kafka's documentation for production) and warmed up before the first contender: %d records written to a topic of its own and read back (%.1f s), then %d records a second in small batches, as the paced run produces them, for %.0f s, so that no contender meets a JVM that has not compiled its hot paths yet", k.private.version, brokerHeap, warmRecords, k.warmed.Seconds(), warmPacedRate, k.warmedPaced.Seconds())
	case k.private != nil:
		return k.private.version + ", a single KRaft node the bench started (scripts/kafka.sh; " + brokerHeap + " heap)"
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
	if k.private != nil {
		k.private.stop()
	}
}

// haveJava reports whether scripts/kafka.sh and the Parallel Consumer can
// run here.
func haveJava() bool {
	_, jerr := exec.LookPath("java")
	_, merr := exec.LookPath("mvn")
	return jerr == nil && merr == nil
}

// privateBroker is a single-node Kafka started by scripts/kafka.sh in a
// directory of its own.
type privateBroker struct {
	script, dir string
	brokers     []string
	version     string
}

func startPrivateBroker() (*privateBroker, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "keyhook-bench-kafka-")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	pb := &privateBroker{script: filepath.Join(root, "scripts", "kafka.sh"), dir: dir, version: "Apache Kafka"}
	out, err := pb.run("start")
	if err != nil {
		pb.stop()
		return nil, fmt.Errorf("bench: start a Kafka broker: %w\n%s", err, out)
	}
	for line := range strings.SplitSeq(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), kafkaBrokersEnv+"="); ok {
			pb.brokers = strings.Split(v, ",")
		}
		// "kafka: Apache Kafka 4.1.1 (KRaft broker+controller, ...)"
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "kafka: Apache Kafka "); ok {
			if ver, _, ok := strings.Cut(v, " "); ok {
				pb.version = "Apache Kafka " + ver
			}
		}
	}
	if len(pb.brokers) == 0 {
		pb.stop()
		return nil, fmt.Errorf("bench: scripts/kafka.sh start named no broker:\n%s", out)
	}
	return pb, nil
}

// brokerHeap is the heap of the broker the bench starts, run with the
// JVM settings Kafka's documentation gives for production. The test
// suite's 512 MB heap collected every 2–3 s under the bench's load, with
// pauses up to 100 ms that every contender and the paced run's latency
// inherited.
const brokerHeap = "6g"

func (pb *privateBroker) run(cmd string) (string, error) {
	c := exec.Command("bash", pb.script, cmd)
	c.Env = append(os.Environ(), "KEYHOOK_KAFKA_DIR="+pb.dir, "KEYHOOK_KAFKA_HEAP="+brokerHeap)
	out, err := c.CombinedOutput()
	return string(out), err
}

// stop stops the broker and removes its directory.
func (pb *privateBroker) stop() {
	if out, err := pb.run("stop"); err != nil {
		fmt.Fprintf(os.Stderr, "bench: stop the Kafka broker: %v\n%s", err, out)
	}
	_ = os.RemoveAll(pb.dir)
}

// moduleRoot is the directory of the go.mod above the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("bench: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("bench: no go.mod above the working directory; run from the repository")
		}
		dir = parent
	}
}

// producer writes a dataset's records, keyed, each stamped with the time
// it is produced (in the record and in its body).
type producer struct {
	cl    *kgo.Client
	data  *dataset
	topic string
	// acked, when set (trackAcks), holds per record how long its produce
	// took to be acknowledged, in ns: the broker had appended it by then.
	acked []atomic.Int64

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
		if err == nil && p.acked != nil {
			p.acked[id].Store(int64(time.Since(ts)))
		}
		if err != nil {
			p.mu.Lock()
			if p.err == nil {
				p.err = err
			}
			p.mu.Unlock()
		}
	})
}

// produceAtRate produces records 0..n-1 at rate records a second, a tick
// every 2 ms, and returns how long it took; it stops early when ctx ends.
func (p *producer) produceAtRate(ctx context.Context, n int, rate float64) time.Duration {
	started := time.Now()
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for sent := 0; sent < n && ctx.Err() == nil; {
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		due := min(n, int(time.Since(started).Seconds()*rate))
		for ; sent < due; sent++ {
			p.produce(ctx, sent)
		}
	}
	return time.Since(started)
}

// trackAcks records the acknowledgement latency of records 0..n-1.
func (p *producer) trackAcks(n int) { p.acked = make([]atomic.Int64, n) }

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
