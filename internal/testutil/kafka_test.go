package testutil

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestKfakeSeedsTopicsOnLoopback(t *testing.T) {
	brokers := Kfake(t, 3, "orders", "payments")

	for _, b := range brokers {
		host, _, err := net.SplitHostPort(b)
		if err != nil || host != "127.0.0.1" {
			t.Errorf("broker %q is not a loopback address (err %v)", b, err)
		}
	}
	if diff := cmp.Diff(map[string]int{"orders": 3, "payments": 3}, partitionCounts(t, brokers)); diff != "" {
		t.Errorf("topics (-want +got):\n%s", diff)
	}
}

func TestCreateTopicsLeavesExistingTopicsAlone(t *testing.T) {
	brokers := Kfake(t, 0)

	CreateTopics(t, brokers, 2, "events")
	// A second call, even with another partition count, must not fail.
	CreateTopics(t, brokers, 5, "events", "audit")

	if diff := cmp.Diff(map[string]int{"events": 2, "audit": 5}, partitionCounts(t, brokers)); diff != "" {
		t.Errorf("topics (-want +got):\n%s", diff)
	}
}

// TestRealKafkaWithoutBrokers defends the tier contract: a developer without
// a broker gets a skip that says how to run the test, CI gets a failure.
func TestRealKafkaWithoutBrokers(t *testing.T) {
	tests := []struct {
		name, ci       string
		wantSkip       bool
		wantFatal      bool
		wantMsgContain string
	}{
		{name: "developer machine skips", ci: "", wantSkip: true, wantMsgContain: "./scripts/test.sh"},
		{name: "CI fails", ci: "true", wantFatal: true, wantMsgContain: "CI must run this test"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(kafkaBrokersEnv, "")
			t.Setenv("CI", tt.ci)
			got := runStopping(t, func(tb testing.TB) { RealKafka(tb) })
			if got.skipped != tt.wantSkip || got.fatal != tt.wantFatal {
				t.Fatalf("skipped %v, failed %v; want skipped %v, failed %v", got.skipped, got.fatal, tt.wantSkip, tt.wantFatal)
			}
			if !strings.Contains(got.msg, tt.wantMsgContain) {
				t.Errorf("message %q does not contain %q", got.msg, tt.wantMsgContain)
			}
		})
	}
}

func TestRealKafkaSplitsBrokerList(t *testing.T) {
	t.Setenv(kafkaBrokersEnv, " 127.0.0.1:9092, 127.0.0.1:9093 ,")
	if diff := cmp.Diff([]string{"127.0.0.1:9092", "127.0.0.1:9093"}, RealKafka(t)); diff != "" {
		t.Errorf("brokers (-want +got):\n%s", diff)
	}
}

// TestRealKafkaAnswers is the integration tier's smoke test: the broker takes
// admin requests, stores a record and serves it back. It logs the broker's
// version, so that CI's log shows what the tier ran against.
func TestRealKafkaAnswers(t *testing.T) {
	t.Parallel()
	brokers := RealKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	adm, err := kadm.NewOptClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	versions, err := adm.ApiVersions(ctx)
	if err != nil {
		t.Fatalf("ApiVersions: %v", err)
	}
	for _, v := range versions.Sorted() {
		if v.Err != nil {
			t.Fatalf("ApiVersions of broker %d: %v", v.NodeID, v.Err)
		}
		t.Logf("broker %d at %v: Apache Kafka %s (guessed from ApiVersions)", v.NodeID, brokers, v.VersionGuess())
	}

	topic := uniqueTopic(t)
	CreateTopics(t, brokers, 1, topic)
	produce(t, brokers, topic, "hello")
	if diff := cmp.Diff([]string{"hello"}, consume(t, brokers, topic, 1)); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}

// TestStartKafkaRestartKeepsRecords defends what fault tests rely on: after a
// crash or a clean restart the broker is back on the same address with every
// record it had acknowledged.
func TestStartKafkaRestartKeepsRecords(t *testing.T) {
	t.Parallel()
	k := StartKafka(t)
	topic := uniqueTopic(t)
	CreateTopics(t, k.Brokers, 1, topic)
	produce(t, k.Brokers, topic, "before crash")

	k.Restart(true)
	produce(t, k.Brokers, topic, "after crash")
	k.Restart(false)

	want := []string{"before crash", "after crash"}
	if diff := cmp.Diff(want, consume(t, k.Brokers, topic, len(want))); diff != "" {
		t.Errorf("records after restarts (-want +got):\n%s", diff)
	}
}

// stopRecorder is a testing.TB whose Skip and Fatal end only the goroutine
// of the function under test, so that a test can check which one it called.
type stopRecorder struct {
	testing.TB
	mu             sync.Mutex
	skipped, fatal bool
	msg            string
}

func (r *stopRecorder) Helper() {}

func (r *stopRecorder) Skip(args ...any) { r.stop(&r.skipped, fmt.Sprint(args...)) }

func (r *stopRecorder) Fatal(args ...any) { r.stop(&r.fatal, fmt.Sprint(args...)) }

func (r *stopRecorder) stop(flag *bool, msg string) {
	r.mu.Lock()
	*flag, r.msg = true, msg
	r.mu.Unlock()
	runtime.Goexit()
}

type stopResult struct {
	skipped, fatal bool
	msg            string
}

func runStopping(t *testing.T, fn func(testing.TB)) stopResult {
	r := &stopRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(r)
	}()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	return stopResult{skipped: r.skipped, fatal: r.fatal, msg: r.msg}
}

// uniqueTopic names a topic after the test and the time, because the shared
// real broker keeps topics of earlier runs and other packages.
func uniqueTopic(t *testing.T) string {
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	return fmt.Sprintf("testutil-%s-%d", name, time.Now().UnixNano())
}

func partitionCounts(t *testing.T, brokers []string) map[string]int {
	t.Helper()
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatalf("list topics: %v", err)
	}
	got := make(map[string]int, len(topics))
	for name, td := range topics {
		got[name] = len(td.Partitions)
	}
	return got
}

func produce(t *testing.T, brokers []string, topic, value string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(value)}).FirstErr(); err != nil {
		t.Fatalf("produce %q to %s: %v", value, topic, err)
	}
}

func consume(t *testing.T, brokers []string, topic string, n int) []string {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []string
	for len(got) < n {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consume %s: got %q, want %d records: %v", topic, got, n, err)
		}
		fetches.EachError(func(topic string, p int32, err error) {
			t.Fatalf("consume %s[%d]: %v", topic, p, err)
		})
		fetches.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	return got
}
