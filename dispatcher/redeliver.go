package dispatcher

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/subscription"
	"github.com/keyhook/keyhook/webhooks"
)

// RedeliverConfig tunes a Redeliverer; zero values mean the defaults.
type RedeliverConfig struct {
	// Retry is the node's default retry policy, under each subscription's.
	Retry webhooks.RetryPolicy
	// Attempts bounds the attempts of each redelivery. Default 3.
	Attempts int
}

// Redeliverer delivers single records of a subscription again the way
// the group delivers them (format, signature, credentials, timeout), with
// a few attempts and no dead letter: the redrive of dead letters, which
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
	cfg.Retry = cfg.Retry.WithDefaults()
	return &Redeliverer{sender: sender, cfg: cfg}, nil
}

// Redeliver delivers r to sub's endpoint under deliveryID with at most
// Attempts attempts, and returns nil once the endpoint accepted it.
func (d *Redeliverer) Redeliver(ctx context.Context, sub *subscription.Subscription, r *kgo.Record, deliveryID string) error {
	req, err := newRequest(sub, r, deliveryID)
	if err != nil {
		return fmt.Errorf("dispatcher: redeliver %s: %w", deliveryID, err)
	}
	req.Signer, req.Auth = sub.Signer(time.Now()), sub.Endpoint.Auth.Auth()
	req.Timeout = time.Duration(sub.Endpoint.TimeoutMS) * time.Millisecond
	policy := sub.Retry.Policy(d.cfg.Retry)
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
