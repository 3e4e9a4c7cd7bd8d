package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The baseline is what users run today: a franz-go group consumer with a
// goroutine per assigned partition (franz-go's goroutine-per-partition
// example with commit marks) that posts each record and takes the next one
// only after a 2xx, marking it for the periodic commit.

// partitionPoster posts one partition's records in order.
type partitionPoster struct {
	cl   *kgo.Client
	http *http.Client
	url  string
	recs chan []*kgo.Record
	quit chan struct{}
	done chan struct{}
}

func (p *partitionPoster) run(ctx context.Context) {
	defer close(p.done)
	for {
		select {
		case <-p.quit:
			return
		case rs := <-p.recs:
			for _, r := range rs {
				if !p.post(ctx, r) {
					return
				}
				p.cl.MarkCommitRecords(r)
			}
		}
	}
}

// post sends r until the endpoint answers 2xx; false when stopped first.
func (p *partitionPoster) post(ctx context.Context, r *kgo.Record) bool {
	wait := 100 * time.Millisecond
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(r.Value))
		if err != nil {
			return false
		}
		req.Header.Set("Content-Type", "application/octet-stream")
		req.Header.Set("Keyhook-Key", string(r.Key))
		req.Header.Set("Keyhook-Partition", strconv.Itoa(int(r.Partition)))
		req.Header.Set("Keyhook-Offset", strconv.FormatInt(r.Offset, 10))
		resp, err := p.http.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				return true
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-p.quit:
			return false
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

type baseline struct {
	ctx  context.Context
	http *http.Client
	url  string

	mu      sync.Mutex
	posters map[int32]*partitionPoster
}

func (b *baseline) assigned(_ context.Context, cl *kgo.Client, assigned map[string][]int32) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, ps := range assigned {
		for _, p := range ps {
			pp := &partitionPoster{
				cl: cl, http: b.http, url: b.url,
				recs: make(chan []*kgo.Record, 4),
				quit: make(chan struct{}), done: make(chan struct{}),
			}
			b.posters[p] = pp
			go pp.run(b.ctx)
		}
	}
}

// revoked stops the partitions' posters and commits what they marked.
func (b *baseline) revoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	b.stopPosters(revoked)
	if err := cl.CommitMarkedOffsets(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "baseline: commit on revoke: %v\n", err)
	}
}

func (b *baseline) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	b.stopPosters(lost)
}

func (b *baseline) stopPosters(tps map[string][]int32) {
	b.mu.Lock()
	var stopping []*partitionPoster
	for _, ps := range tps {
		for _, p := range ps {
			if pp := b.posters[p]; pp != nil {
				close(pp.quit)
				stopping = append(stopping, pp)
				delete(b.posters, p)
			}
		}
	}
	b.mu.Unlock()
	for _, pp := range stopping {
		<-pp.done
	}
}

func runBaseline(ctx context.Context, spec childSpec, out *childOut, rep *childReport) error {
	b := &baseline{
		ctx: ctx, url: spec.SinkURL,
		http:    &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: spec.Partitions}, Timeout: 30 * time.Second},
		posters: make(map[int32]*partitionPoster),
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(spec.Brokers...),
		kgo.ConsumerGroup(spec.Group),
		kgo.ConsumeTopics(spec.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(time.Second),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(b.assigned),
		kgo.OnPartitionsRevoked(b.revoked),
		kgo.OnPartitionsLost(b.lost),
	)
	if err != nil {
		return fmt.Errorf("bench: baseline client: %w", err)
	}
	smp := startSampler(ctx, spec.SampleEvery, nil)
	out.line(lineReady)
	for {
		fetches := cl.PollFetches(ctx)
		if fetches.IsClientClosed() || ctx.Err() != nil {
			cl.AllowRebalance()
			break
		}
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			b.mu.Lock()
			pp := b.posters[p.Partition]
			b.mu.Unlock()
			if pp == nil {
				return
			}
			select {
			case pp.recs <- p.Records:
			case <-ctx.Done():
			}
		})
		cl.AllowRebalance()
	}
	// Leaving the group revokes every partition: posters stop, marks are
	// committed.
	cl.Close()
	b.stopPosters(map[string][]int32{spec.Topic: allPartitions(spec.Partitions)})
	rep.Samples = smp.wait(nil)
	return nil
}

func allPartitions(n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(i)
	}
	return out
}
