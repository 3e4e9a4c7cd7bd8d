package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// producer writes records at a steady rate, each registered with the sink
// first, its value "<seq> <produce time in unix nanos>" and its key one of
// the sink gives, so that every key's records are in sequence order.
type producer struct {
	cl   *kgo.Client
	sink *sink
}

// run produces rate records a second until ctx ends or d passes, and
// returns the sequence numbers [from, to) it produced once every one of
// them was acknowledged.
func (p *producer) run(ctx context.Context, rate float64, d time.Duration) (from, to int, err error) {
	errs := make(chan error, 1)
	from, to = paced(ctx, rate, d, func() int { return p.produce(errs) })
	if err := p.cl.Flush(context.Background()); err != nil {
		return from, to, err
	}
	select {
	case err := <-errs:
		return from, to, err
	default:
	}
	return from, to, nil
}

// paced calls next rate times a second until ctx ends or d passes, and
// returns the sequence numbers [from, to) next returned ([0, 0) none).
func paced(ctx context.Context, rate float64, d time.Duration, next func() int) (from, to int) {
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	end := time.After(d)
	from, to = -1, -1
	for {
		select {
		case <-ctx.Done():
		case <-end:
		case <-tick.C:
			seq := next()
			if from < 0 {
				from = seq
			}
			to = seq + 1
			continue
		}
		if from < 0 {
			return 0, 0
		}
		return from, to
	}
}

// burst produces n records at once and returns their sequence numbers
// [from, to) once every one was acknowledged.
func (p *producer) burst(n int) (from, to int, err error) {
	errs := make(chan error, 1)
	from = -1
	for range n {
		seq := p.produce(errs)
		if from < 0 {
			from = seq
		}
		to = seq + 1
	}
	if err := p.cl.Flush(context.Background()); err != nil {
		return from, to, err
	}
	select {
	case err := <-errs:
		return from, to, err
	default:
	}
	return from, to, nil
}

// produce sends the next record and returns its sequence number.
func (p *producer) produce(errs chan error) int {
	now := time.Now().UnixNano()
	seq, key := p.sink.register(now)
	r := &kgo.Record{Key: []byte("k" + strconv.Itoa(key)), Value: []byte(strconv.Itoa(seq) + " " + strconv.FormatInt(now, 10))}
	p.cl.Produce(context.Background(), r, func(r *kgo.Record, err error) {
		if err != nil {
			select {
			case errs <- fmt.Errorf("produce record %d: %w", seq, err):
			default:
			}
			return
		}
		p.sink.setPartition(seq, r.Partition)
	})
	return seq
}

// brokerBytes reads the broker's BytesInPerSec and BytesOutPerSec counts
// for one topic over JMX, with Kafka's own JmxTool run by scripts/kafka.sh
// jmx against the broker of the state dir dir (started with
// KEYHOOK_KAFKA_JMX_PORT). A topic's counters count what producers sent to
// it and what fetches (consumers') read from it, nothing else.
type brokerBytes struct {
	script, dir, topic string
}

func (b *brokerBytes) read() (in, out float64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The pattern matches the broker-wide MBeans too, which exist from
	// the start: a topic's appear with its first bytes, and JmxTool fails
	// on a query that matches nothing.
	cmd := exec.CommandContext(ctx, b.script, "jmx", "kafka.server:type=BrokerTopicMetrics,name=Bytes*PerSec,*", "Count")
	cmd.Env = append(os.Environ(), "KEYHOOK_KAFKA_DIR="+b.dir)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.Output()
	if err != nil {
		return 0, 0, fmt.Errorf("%s jmx: %w", b.script, err)
	}
	for _, line := range strings.Split(string(stdout), "\n") {
		name, value, ok := parseCount(line)
		if !ok || name["topic"] != b.topic {
			continue
		}
		switch name["name"] {
		case "BytesInPerSec":
			in = value
		case "BytesOutPerSec":
			out = value
		}
	}
	return in, out, nil
}

// parseCount parses a line of JmxTool's csv report,
// `domain:k=v,k=v:Count,"123"`, into the object name's properties and the
// value.
func parseCount(line string) (map[string]string, float64, bool) {
	obj, value, ok := strings.Cut(line, ":Count,")
	if !ok {
		return nil, 0, false
	}
	_, props, ok := strings.Cut(obj, ":")
	if !ok {
		return nil, 0, false
	}
	v, err := strconv.ParseFloat(strings.Trim(value, `"`), 64)
	if err != nil {
		return nil, 0, false
	}
	name := map[string]string{}
	for _, kv := range strings.Split(props, ",") {
		k, v, _ := strings.Cut(kv, "=")
		name[k] = v
	}
	return name, v, true
}
