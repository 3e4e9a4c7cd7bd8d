package verify

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// SampleInterval is how often a CommitSampler reads the group's commits.
const SampleInterval = 50 * time.Millisecond

// CommitSample is one observed change of a partition's committed offset;
// At is taken after the fetch returned, so the commit was made before it.
type CommitSample struct {
	At     time.Time
	Offset int64
}

// CommitSampler polls a group's committed offsets for the whole test. It
// keeps every change per partition for the verifier and records at once a
// commit that moved backwards.
type CommitSampler struct {
	adm          *kadm.Client
	group, topic string
	partitions   int32

	mu        sync.Mutex
	samples   map[int32][]CommitSample
	decreases []string
	polls     int
	failures  int
}

// NewCommitSampler samples group's commits of topic's partitions
// [0, partitions) once Run runs.
func NewCommitSampler(adm *kadm.Client, group, topic string, partitions int32) *CommitSampler {
	return &CommitSampler{adm: adm, group: group, topic: topic, partitions: partitions,
		samples: make(map[int32][]CommitSample)}
}

// Run polls every SampleInterval until ctx ends.
func (s *CommitSampler) Run(ctx context.Context) {
	tick := time.NewTicker(SampleInterval)
	defer tick.Stop()
	for {
		s.poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (s *CommitSampler) poll(ctx context.Context) {
	fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	offs, err := s.adm.FetchOffsets(fctx, s.group)
	at := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.polls++
	if err == nil {
		err = offs.Error()
	}
	if err != nil {
		s.failures++ // the broker restarting or the coordinator loading
		return
	}
	for p := range s.partitions {
		o, ok := offs.Lookup(s.topic, p)
		if !ok || o.Err != nil || o.At < 0 {
			continue
		}
		prev := s.samples[p]
		if n := len(prev); n > 0 {
			last := prev[n-1].Offset
			if o.At == last {
				continue
			}
			if o.At < last {
				s.decreases = append(s.decreases, fmt.Sprintf("partition %d: commit went from %d back to %d at %s", p, last, o.At, at.Format("15:04:05.000")))
			}
		}
		s.samples[p] = append(prev, CommitSample{At: at, Offset: o.At})
	}
}

// Stats reports the polls made, how many failed (group not yet created,
// broker away) and the commits observed.
func (s *CommitSampler) Stats() (polls, failures, commits int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range s.samples {
		commits += len(v)
	}
	return s.polls, s.failures, commits
}

// observed returns a copy of the samples and the backward moves.
func (s *CommitSampler) observed() (map[int32][]CommitSample, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int32][]CommitSample, len(s.samples))
	for p, v := range s.samples {
		out[p] = append([]CommitSample(nil), v...)
	}
	return out, append([]string(nil), s.decreases...)
}
