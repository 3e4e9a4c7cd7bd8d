package dispatcher

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keyhook/keyhook/partition"
	"github.com/keyhook/keyhook/recordexpr"
	"github.com/keyhook/keyhook/webhooks"
)

// filter marks r Skip when the subscription's filter rejects it: the
// machine then acks it without delivery. A filter that fails to evaluate
// lets the record through; with on_filter_error "dead_letter" its
// delivery evaluates it again and dead-letters it with the error (see
// delivery.Endpoint.Shape), and a value that does not decode is
// dead-lettered there whatever the setting. A record of a registry format
// whose schema is not cached yet passes too (the decoder started the
// fetch; it never waits here): its delivery waits for the schema and
// evaluates the filter then (delivery.ErrFiltered). Either way nothing is
// dropped and nothing stalls. It runs on the worker's goroutine.
func (g *group) filter(r partition.Record[*kgo.Record]) partition.Record[*kgo.Record] {
	if r.Control || !g.ep.Filters() {
		return r
	}
	in := exprRecord(r.Payload)
	if pass, err := g.ep.Filter(&in); err == nil && !pass {
		r.Skip = true
		g.filtered.Add(1)
		g.tel.filtered.Add(context.Background(), 1, g.opts.subAdd...)
	}
	return r
}

// shape puts into m, filled from r, the body the subscription sends (its
// transform, or the value checked against its format). Its error is
// final: the record is dead-lettered with it.
func (g *group) shape(m *webhooks.Message, r *kgo.Record) error {
	if !g.ep.Shapes() {
		return nil
	}
	in := exprRecord(r)
	return g.ep.Shape(m, &in)
}

// exprRecord is r as expressions see it.
func exprRecord(r *kgo.Record) recordexpr.Record {
	return recordexpr.Record{
		Key: r.Key, Value: r.Value, Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp,
		Headers: func(yield func(string, []byte) bool) {
			for _, h := range r.Headers {
				if !yield(h.Key, h.Value) {
					return
				}
			}
		},
	}
}
