package faults

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/internal/testutil"
	"github.com/keyhook/keyhook/internal/verify"
)

// The broker restarts mid-stream, once cleanly and once killed (SIGKILL):
// the nodes lose the broker, maybe their partitions, and carry on when it
// is back. Nothing is lost, the commit never moves backwards, and
// duplicates stay within what was in flight or unflushed around each
// restart. The broker is the test's own: the shared one must never restart.
func TestFaultBrokerRestart(t *testing.T) {
	const records, rate = 40_000, 800
	const settleAfter = 15 * time.Second
	k := testutil.StartKafka(t)
	c := newCluster(t, "broker-restart", clusterConfig{brokers: k.Brokers, latency: smallLatency})
	c.startNodes()
	prod := c.produce(records, rate)

	for _, kill := range []bool{false, true} {
		sleepFor(10 * time.Second)
		from := time.Now()
		k.Restart(kill)
		back := time.Now()
		sleepFor(settleAfter)
		inFlight, unflushed := c.windowBound(from, time.Now())
		how := "clean"
		if kill {
			how = "SIGKILL"
		}
		c.addBound(inFlight+unflushed, fmt.Sprintf("broker restart (%s, away %v): at most %d in flight + at most %d completed in any %v, from the stop until %v after the restart",
			how, back.Sub(from).Round(time.Millisecond), inFlight, unflushed, unflushedWindow, settleAfter))
	}
	prod.wait(2 * time.Minute)
	c.finish()
	t.Logf("  node logs: %v", c.logLines("partitions lost", "commit failed", "fenced", "fetch error"))
}

// A transactional producer commits some batches and aborts others: the
// aborted records leave gaps in the offsets, and every transaction ends
// with a control record. Aborted records are never delivered, and the
// commit still reaches the log end (the high watermark, which counts the
// control records).
func TestFaultGappedOffsets(t *testing.T) {
	const txns, perTxn = 45, 100
	c := newCluster(t, "gapped-offsets", clusterConfig{latency: smallLatency})
	c.startNodes()

	cl := newClient(t, c.brokers,
		kgo.TransactionalID("faults-"+c.topic),
		kgo.DefaultProduceTopic(c.topic),
		kgo.ProducerLinger(5*time.Millisecond),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	aborted := 0
	for i := range txns {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatalf("begin transaction %d: %v", i, err)
		}
		seqs := make([]int64, 0, perTxn)
		for j := range perTxn {
			seq := int64(i*perTxn + j)
			seqs = append(seqs, seq)
			cl.Produce(ctx, verify.Record(seq, c.cfg.keys), nil)
		}
		if err := cl.Flush(ctx); err != nil {
			t.Fatalf("flush transaction %d: %v", i, err)
		}
		// Every third transaction aborts, the last one included, so the
		// log ends with an abort marker.
		commit := i%3 != 2
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatalf("end transaction %d (commit %v): %v", i, commit, err)
		}
		if commit {
			c.expect(seqs...)
		} else {
			aborted++
		}
		time.Sleep(100 * time.Millisecond)
	}
	o := c.finish()
	if want := (txns - aborted) * perTxn; o.Records != want {
		t.Errorf("%d committed data records in the log, want %d", o.Records, want)
	}
	gaps := 0
	for p, end := range c.ends() {
		for off := range end {
			if o.Data[verify.OffsetKey{Partition: p, Offset: off}] == nil {
				gaps++
			}
		}
	}
	t.Logf("  %d transactions, %d aborted: %d offsets are gaps (aborted records and transaction markers)", txns, aborted, gaps)
}

// ends returns the log end of every partition of the topic.
func (c *cluster) ends() map[int32]int64 {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := c.logEnds(ctx, c.topic)
	if err != nil {
		c.t.Fatalf("log ends: %v", err)
	}
	return ends
}
