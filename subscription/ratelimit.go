package subscription

import "fmt"

// RateLimit bounds the requests a subscription sends its endpoint, over
// every node together: at most PerSecond a second on average, with Burst
// of them at once after a quiet spell. The zero value is no limit. A
// record waiting for its turn holds neither a delivery slot nor an
// attempt of its retry budget, and its key keeps its order.
type RateLimit struct {
	// PerSecond is the sustained rate; 0 (with Burst 0) is no limit.
	PerSecond int `json:"per_second,omitempty"`
	// Burst is how many requests may go at once after the subscription
	// was quiet; 0 means DefaultBurst(PerSecond).
	Burst int `json:"burst,omitempty"`
}

// Limits of RateLimit.
const (
	MaxRateLimitPerSecond = 100000
	MaxRateLimitBurst     = 100000
)

// Enabled reports whether the subscription is rate limited.
func (r RateLimit) Enabled() bool { return r.PerSecond > 0 }

// BurstOrDefault is Burst, or its default when 0.
func (r RateLimit) BurstOrDefault() int {
	if r.Burst > 0 {
		return r.Burst
	}
	return DefaultBurst(r.PerSecond)
}

// DefaultBurst is a tenth of perSecond, at least 1: any one-second window
// then sees at most 1.1 × perSecond requests (the rate and one burst),
// while the nodes still take tokens a few at a time.
func DefaultBurst(perSecond int) int { return max(1, perSecond/10) }

func (r RateLimit) validate(add func(field, msg string)) {
	if r == (RateLimit{}) {
		return
	}
	if r.PerSecond < 1 || r.PerSecond > MaxRateLimitPerSecond {
		add("rate_limit.per_second", fmt.Sprintf("must be between 1 and %d when rate_limit is set", MaxRateLimitPerSecond))
	}
	if r.Burst < 0 || r.Burst > MaxRateLimitBurst {
		add("rate_limit.burst", fmt.Sprintf("must be between 0 (a tenth of per_second) and %d", MaxRateLimitBurst))
	}
}
