package testutil

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaTiers runs f against kfake, and against the real broker when the
// integration tier is on (with the topics created there).
func KafkaTiers(t *testing.T, partitions int32, topics []string, f func(t *testing.T, brokers []string)) {
	t.Run("kfake", func(t *testing.T) {
		f(t, Kfake(t, partitions, topics...))
	})
	t.Run("kafka", func(t *testing.T) {
		brokers := RealKafka(t)
		CreateTopics(t, brokers, partitions, topics...)
		f(t, brokers)
	})
}

// UniqueTopic names a topic no other test on a shared broker uses.
func UniqueTopic(base string) string {
	return fmt.Sprintf("%s-%d", base, time.Now().UnixNano())
}

// Admin returns an admin client of brokers, closed when the test ends.
func Admin(t testing.TB, brokers []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// Committed reads the group's committed offsets by partition, over all
// its topics.
func Committed(ctx context.Context, adm *kadm.Client, group string) (map[int32]int64, error) {
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return nil, err
	}
	out := make(map[int32]int64)
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Err == nil {
			out[o.Partition] = o.At
		}
	})
	return out, nil
}

// WaitCommitted waits until the group committed every partition's end,
// failing the test after timeout.
func WaitCommitted(t testing.TB, adm *kadm.Client, group string, ends map[int32]int64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var got map[int32]int64
	for time.Now().Before(deadline) {
		var err error
		if got, err = Committed(context.Background(), adm, group); err == nil {
			done := true
			for p, end := range ends {
				if got[p] != end {
					done = false
				}
			}
			if done {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("commits did not reach the log end in %v: got %v, want %v", timeout, got, ends)
}
