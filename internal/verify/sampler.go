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
func (s *CommitSampler) Run(ctx context.Context) { pollEvery(ctx, s.poll) }

// pollEvery calls poll at once and then every SampleInterval until ctx
// ends.
func pollEvery(ctx context.Context, poll func(context.Context)) {
	tick := time.NewTicker(SampleInterval)
	defer tick.Stop()
	for {
		poll(ctx)
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
	if err == nil {
		err = offs.Error()
	}
	s.record(offs, err, time.Now())
}

// record keeps what one fetch of the group's commits returned at at.
func (s *CommitSampler) record(offs kadm.OffsetResponses, err error, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.polls++
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

// CommitSamplers samples many groups' commits of one topic with one
// request per poll (per coordinator): a test with fifty subscriptions would
// otherwise send the broker a thousand fetches a second.
type CommitSamplers struct {
	adm    *kadm.Client
	groups []string
	// byGroup is fixed at construction; each sampler guards its own
	// samples.
	byGroup map[string]*CommitSampler
}

// NewCommitSamplers samples each of groups' commits of topic's partitions
// [0, partitions) once Run runs.
func NewCommitSamplers(adm *kadm.Client, groups []string, topic string, partitions int32) *CommitSamplers {
	m := &CommitSamplers{adm: adm, groups: groups, byGroup: make(map[string]*CommitSampler, len(groups))}
	for _, g := range groups {
		m.byGroup[g] = NewCommitSampler(adm, g, topic, partitions)
	}
	return m
}

// For returns group's sampler (nil for a group not sampled).
func (m *CommitSamplers) For(group string) *CommitSampler { return m.byGroup[group] }

// Run polls every SampleInterval until ctx ends.
func (m *CommitSamplers) Run(ctx context.Context) { pollEvery(ctx, m.poll) }

func (m *CommitSamplers) poll(ctx context.Context) {
	fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	fetched := m.adm.FetchManyOffsets(fctx, m.groups...)
	at := time.Now()
	for _, g := range m.groups {
		r, ok := fetched[g]
		err := r.Err
		if !ok {
			err = fmt.Errorf("group %s not in the response", g)
		} else if err == nil {
			err = r.Fetched.Error()
		}
		m.byGroup[g].record(r.Fetched, err, at)
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
