package breaker

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Set holds one Breaker per origin, made on first use; create one per
// node and share it. It is safe for concurrent use.
type Set struct {
	cfg Config

	// mu guards byOrigin.
	mu       sync.Mutex
	byOrigin map[string]*Breaker
}

// NewSet returns a set of breakers configured by cfg, or an error naming
// the wrong field.
func NewSet(cfg Config) (*Set, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("breaker: %w", err)
	}
	return &Set{cfg: cfg.withDefaults(), byOrigin: make(map[string]*Breaker)}, nil
}

// Enabled reports whether the set's breakers are on.
func (s *Set) Enabled() bool { return s != nil && s.cfg.Failures > 0 }

// For returns origin's breaker, nil when breakers are off.
func (s *Set) For(origin string) *Breaker {
	if !s.Enabled() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.byOrigin[origin]
	if !ok {
		b = newBreaker(origin, s.cfg)
		s.byOrigin[origin] = b
	}
	return b
}

// Status is one breaker that is not closed.
type Status struct {
	Origin string `json:"origin"`
	// State is "open" or "half-open".
	State string `json:"state"`
	// Since is when it opened last.
	Since time.Time `json:"since"`
	// Waiting is how many deliveries it holds back on this node.
	Waiting int `json:"waiting"`
}

// NotClosed lists the breakers that are open or half-open, by origin.
func (s *Set) NotClosed() []Status {
	if !s.Enabled() {
		return nil
	}
	s.mu.Lock()
	all := make([]*Breaker, 0, len(s.byOrigin))
	for _, b := range s.byOrigin {
		all = append(all, b)
	}
	s.mu.Unlock()
	var out []Status
	for _, b := range all {
		b.mu.Lock()
		b.note(b.m.due(b.cfg.Now()))
		if st := b.m.state; st != Closed {
			out = append(out, Status{Origin: b.origin, State: st.String(), Since: b.m.until.Add(-b.cfg.Interval), Waiting: len(b.waiters)})
		}
		b.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b Status) int { return strings.Compare(a.Origin, b.Origin) })
	return out
}

// States returns every breaker's state by origin, for metrics.
func (s *Set) States() map[string]State {
	if !s.Enabled() {
		return nil
	}
	s.mu.Lock()
	all := make([]*Breaker, 0, len(s.byOrigin))
	for _, b := range s.byOrigin {
		all = append(all, b)
	}
	s.mu.Unlock()
	out := make(map[string]State, len(all))
	for _, b := range all {
		out[b.origin] = b.State()
	}
	return out
}
