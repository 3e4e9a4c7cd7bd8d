package dispatcher

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/delivery"
	"github.com/keyhook/keyhook/webhooks"
)

// RedeliverConfig tunes a Redeliverer; zero values mean the defaults.
type RedeliverConfig struct {
	// Attempts bounds the attempts of each redelivery. Default 3.
	Attempts int
}

// Redeliverer delivers single records of a subscription again through
// the group's [delivery.Endpoint], as every other delivery (format,
// signature, credentials, timeout), with a few attempts and no dead letter: the redrive of dead letters, which
// the owner of their source partition sends through the key's lane.
type Redeliverer struct {
	sender Sender
	cfg    RedeliverConfig
}

// NewRedeliverer builds a Redeliverer that sends through sender.
func NewRedeliverer(sender Sender, cfg RedeliverConfig) (*Redeliverer, error) {
	if cfg.Attempts < 0 {
		return nil, fmt.Errorf("dispatcher: RedeliverConfig.Attempts must not be negative, got %d", cfg.Attempts)
	}
	if cfg.Attempts == 0 {
		cfg.Attempts = 3
	}
	return &Redeliverer{sender: sender, cfg: cfg}, nil
}

// Redeliver delivers r to ep under deliveryID with at most Attempts
// attempts, and returns nil once the endpoint accepted it.
func (d *Redeliverer) Redeliver(ctx context.Context, ep *delivery.Endpoint, r *kgo.Record, deliveryID string) error {
	req, err := ep.Render(message(ep.Subscription(), r, deliveryID))
	if err != nil {
		return fmt.Errorf("dispatcher: redeliver %s: %w", deliveryID, err)
	}
	policy := ep.Policy()
	policy.MaxAttempts = d.cfg.Attempts
	res := d.sender.Deliver(ctx, req, policy, nil)
	if res.Outcome == webhooks.OutcomeSuccess {
		return nil
	}
	err = res.Err
	if err == nil {
		err = res.Last.Err
	}
	if err == nil {
		err = fmt.Errorf("endpoint answered %d", res.Last.Status)
	}
	return fmt.Errorf("dispatcher: redeliver %s: %w", deliveryID, err)
}
