package testutil

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	// kafkaBrokersEnv names the real broker of the integration tier;
	// scripts/test.sh sets it after starting one with scripts/kafka.sh.
	kafkaBrokersEnv = "KEYHOOK_TEST_KAFKA_BROKERS"
	// kafkaLogEnv is the broker log of that broker, when scripts/test.sh
	// started it; failing tests point at it.
	kafkaLogEnv = "KEYHOOK_TEST_KAFKA_LOG"

	// kafkaScriptTimeout bounds one scripts/kafka.sh call: a start waits up
	// to 90 s for the broker and may first fetch its jars.
	kafkaScriptTimeout = 5 * time.Minute
	// topicReadyTimeout bounds creating topics and waiting for their leaders.
	topicReadyTimeout = 30 * time.Second
)

// RealKafka returns the brokers of the real Kafka named by
// KEYHOOK_TEST_KAFKA_BROKERS (comma-separated host:port). Without it the test
// is skipped with a message saying how to run it (./scripts/test.sh), except
// when CI=true, where it fails: CI must run the integration tier.
//
// The broker is shared by the tests of every package running at the same
// time: use topic and group names of the test's own, and never restart it
// (StartKafka gives a test a broker it may restart).
func RealKafka(t testing.TB) []string {
	t.Helper()
	brokers := requireIntegrationTier(t)
	if logPath := os.Getenv(kafkaLogEnv); logPath != "" {
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("real Kafka broker log: %s (scripts/test.sh keeps a copy when tests fail)", logPath)
			}
		})
	}
	return brokers
}

// requireIntegrationTier returns the brokers of KEYHOOK_TEST_KAFKA_BROKERS,
// or skips the test (fails it when CI=true) when the variable is unset.
func requireIntegrationTier(t testing.TB) []string {
	t.Helper()
	var brokers []string
	for b := range strings.SplitSeq(os.Getenv(kafkaBrokersEnv), ",") {
		if b = strings.TrimSpace(b); b != "" {
			brokers = append(brokers, b)
		}
	}
	if len(brokers) > 0 {
		return brokers
	}
	msg := fmt.Sprintf("integration tier: %s is not set; run ./scripts/test.sh, "+
		"which starts a real Apache Kafka broker, or set it to a broker's host:port", kafkaBrokersEnv)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI=true: CI must run this test)")
	}
	t.Skip(msg)
	return nil
}

// Kfake starts an in-process kfake cluster (one broker, listening on a free
// loopback port) with the given topics pre-created with partitions partitions
// each, and closes it when the test ends. It returns the seed brokers.
//
// Like the real broker of scripts/kafka.sh, the cluster creates unknown
// topics on first use, with one partition.
func Kfake(t testing.TB, partitions int32, topics ...string) []string {
	t.Helper()
	return KfakeCluster(t, partitions, topics...).ListenAddrs()
}

// KfakeCluster is Kfake for a test that controls the cluster's requests
// (kfake.Cluster.ControlKey): it returns the cluster.
func KfakeCluster(t testing.TB, partitions int32, topics ...string) *kfake.Cluster {
	t.Helper()
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(1),
	}
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(partitions, topics...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("testutil: start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// CreateTopics creates topics with partitions partitions each (replication
// factor 1) through kadm on any cluster, kfake or real. A topic that already
// exists is left as it is. It returns once every partition of every topic has
// a leader, so that the test can produce at once.
func CreateTopics(t testing.TB, brokers []string, partitions int32, topics ...string) {
	t.Helper()
	if len(topics) == 0 {
		return
	}
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatalf("testutil: kadm client: %v", err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), topicReadyTimeout)
	defer cancel()

	resps, err := adm.CreateTopics(ctx, partitions, 1, nil, topics...)
	if err != nil {
		t.Fatalf("testutil: create topics %v: %v", topics, err)
	}
	for _, r := range resps.Sorted() {
		if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			t.Fatalf("testutil: create topic %q: %v (%s)", r.Topic, r.Err, r.ErrMessage)
		}
	}
	if err := waitForLeaders(ctx, adm, topics); err != nil {
		t.Fatalf("testutil: topics %v: %v", topics, err)
	}
}

// waitForLeaders polls metadata until every partition of topics has a leader:
// a real broker answers CreateTopics before its metadata shows the leaders,
// and producing in between fails with retriable errors that slow tests down.
func waitForLeaders(ctx context.Context, adm *kadm.Client, topics []string) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		md, err := adm.Metadata(ctx, topics...)
		if err == nil {
			err = leadersMissing(md, topics)
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no leaders: %w (last: %w)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

func leadersMissing(md kadm.Metadata, topics []string) error {
	for _, name := range topics {
		td, ok := md.Topics[name]
		switch {
		case !ok:
			return fmt.Errorf("topic %q not in metadata", name)
		case td.Err != nil:
			return fmt.Errorf("topic %q: %w", name, td.Err)
		case len(td.Partitions) == 0:
			return fmt.Errorf("topic %q has no partitions yet", name)
		}
		for _, p := range td.Partitions {
			if p.Err != nil || p.Leader < 0 {
				return fmt.Errorf("topic %q partition %d has no leader (%v)", name, p.Partition, p.Err)
			}
		}
	}
	return nil
}

// Kafka is a real Apache Kafka broker owned by one test, run by
// scripts/kafka.sh in a state dir of its own (see StartKafka).
type Kafka struct {
	// Brokers are the seed brokers, one loopback address that stays the same
	// across restarts.
	Brokers []string
	// Dir is the broker's state dir: config, data and broker.log.
	Dir string
	// LogPath is the broker's log file.
	LogPath string

	script string
	t      testing.TB
}

// StartKafka starts a real Apache Kafka broker for this test alone, through
// scripts/kafka.sh with a state dir in the test's temp dir, and stops it when
// the test ends. It belongs to the integration tier: without
// KEYHOOK_TEST_KAFKA_BROKERS the test is skipped (fails when CI=true), as with
// RealKafka. It needs Java 17+ and the jars that scripts/test.sh has already
// fetched (or mvn to fetch them).
//
// Use it for tests that restart or crash the broker; everything else should
// share the broker of RealKafka, which starts nothing.
func StartKafka(t testing.TB) *Kafka {
	t.Helper()
	requireIntegrationTier(t)
	root, err := moduleRoot()
	if err != nil {
		t.Fatalf("testutil: %v", err)
	}
	dir := t.TempDir()
	k := &Kafka{
		Dir:     dir,
		LogPath: filepath.Join(dir, "broker.log"),
		script:  filepath.Join(root, "scripts", "kafka.sh"),
		t:       t,
	}
	// Registered before starting: a start that times out on our side may
	// leave a broker behind, and stop is safe on a dir without one.
	t.Cleanup(k.stop)
	k.Brokers = k.run("start")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("private Kafka broker log: %s", k.LogPath)
		}
	})
	return k
}

// Restart stops the broker and starts it again on the same port with the same
// data, and returns once it serves again. With kill true the broker is ended
// with SIGKILL, as in a crash, instead of shutting down cleanly. Clients keep
// their seed brokers: Brokers does not change.
func (k *Kafka) Restart(kill bool) {
	k.t.Helper()
	args := []string{"restart"}
	if kill {
		args = append(args, "--kill")
	}
	brokers := k.run(args...)
	if strings.Join(brokers, ",") != strings.Join(k.Brokers, ",") {
		k.t.Fatalf("testutil: Kafka restarted on %v, want %v", brokers, k.Brokers)
	}
}

// String describes the broker for test logs.
func (k *Kafka) String() string {
	return fmt.Sprintf("Apache Kafka %s (dir %s)", strings.Join(k.Brokers, ","), k.Dir)
}

func (k *Kafka) stop() {
	if _, err := k.exec("stop"); err != nil {
		k.t.Errorf("testutil: stop Kafka: %v", err)
	}
}

// run calls scripts/kafka.sh for start or restart and returns the brokers it
// printed; its stderr (the broker version and log path) goes to the test log.
func (k *Kafka) run(args ...string) []string {
	k.t.Helper()
	out, err := k.exec(args...)
	if err != nil {
		k.t.Fatalf("testutil: scripts/kafka.sh %s: %v", strings.Join(args, " "), err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	addrs, ok := strings.CutPrefix(lines[len(lines)-1], kafkaBrokersEnv+"=")
	if !ok || addrs == "" {
		k.t.Fatalf("testutil: scripts/kafka.sh %s printed no brokers: %q", strings.Join(args, " "), out)
	}
	return strings.Split(addrs, ",")
}

func (k *Kafka) exec(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), kafkaScriptTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{k.script}, args...)...)
	cmd.Env = append(os.Environ(), "KEYHOOK_KAFKA_DIR="+k.Dir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if msg := strings.TrimSpace(stderr.String()); msg != "" {
		k.t.Logf("scripts/kafka.sh %s:\n%s", strings.Join(args, " "), msg)
	}
	if err != nil {
		return "", fmt.Errorf("%w (stderr above)", err)
	}
	return stdout.String(), nil
}

// moduleRoot finds the folder holding go.mod and scripts/kafka.sh, walking up
// from the test's working directory (its package folder).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("module root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "scripts", "kafka.sh")); err != nil {
				return "", fmt.Errorf("module root %s: %w", dir, err)
			}
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("module root: no go.mod above the working directory")
		}
		dir = parent
	}
}

// kafkaDirEnv names the state dir of the broker scripts/test.sh started,
// and kafkaDefaultDir is scripts/kafka.sh's when it is unset.
const (
	kafkaDirEnv     = "KEYHOOK_KAFKA_DIR"
	kafkaDefaultDir = "/tmp/keyhook-kafka"
)

// KafkaCut starts a Proxy to the CUT listener of the real broker of
// RealKafka (see scripts/kafka.sh), at the address that listener
// advertises, and returns it: a client seeded with its Addr reaches the
// broker only through it, metadata included, so the test can cut that
// one client off from Kafka while every other keeps the first listener.
// Without the broker's state dir (KEYHOOK_KAFKA_DIR, as scripts/test.sh
// sets it) the test is skipped, or fails when CI=true.
func KafkaCut(t testing.TB) *Proxy {
	t.Helper()
	RealKafka(t)
	dir := os.Getenv(kafkaDirEnv)
	if dir == "" {
		dir = kafkaDefaultDir
	}
	data, err := os.ReadFile(filepath.Join(dir, "cut"))
	if err != nil {
		msg := fmt.Sprintf("testutil: the broker has no CUT listener (%v): start it with scripts/kafka.sh and set %s to its state dir", err, kafkaDirEnv)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	f := strings.Fields(string(data))
	if len(f) != 2 {
		t.Fatalf("testutil: %s/cut holds %q, want a proxy address and a listener address", dir, data)
	}
	return StartProxy(t, f[0], f[1])
}
