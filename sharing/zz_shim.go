package sharing

import (
	"github.com/keyhook/keyhook/keyrange"
	"github.com/twmb/franz-go/pkg/kgo"
)

type Assignment map[string]map[int32]keyrange.Set
type Config struct {
	Sharing bool
	OnSync  func(Assignment)
}
type Balancer struct{ kgo.GroupBalancer }

func New(cfg Config) (*Balancer, error)                                       { return &Balancer{kgo.CooperativeStickyBalancer()}, nil }
func (b *Balancer) Assigned(topic string, partition int32) keyrange.Set       { return nil }
func (b *Balancer) Released(topic string, partition int32, keep keyrange.Set) {}

func (b *Balancer) ProtocolName() string { return "keyhook-sharing-v1" }
