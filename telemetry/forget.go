package telemetry

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// subscriptionLabel is the Prometheus name of the keyhook.subscription
// attribute every per-subscription series carries.
const subscriptionLabel = "keyhook_subscription"

// forgetting gathers from g without the series of forgotten
// subscriptions.
type forgetting struct {
	g prometheus.Gatherer

	mu   sync.RWMutex
	gone map[string]bool
}

func (f *forgetting) forget(subscriptionID string) {
	f.mu.Lock()
	f.gone[subscriptionID] = true
	f.mu.Unlock()
}

// Gather implements prometheus.Gatherer.
func (f *forgetting) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := f.g.Gather()
	f.mu.RLock()
	defer f.mu.RUnlock()
	if len(f.gone) == 0 {
		return mfs, err
	}
	out := mfs[:0]
	for _, mf := range mfs {
		kept := mf.Metric[:0]
		for _, m := range mf.Metric {
			if !f.forgotten(m) {
				kept = append(kept, m)
			}
		}
		mf.Metric = kept
		if len(kept) > 0 {
			out = append(out, mf)
		}
	}
	return out, err
}

func (f *forgetting) forgotten(m *dto.Metric) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == subscriptionLabel {
			return f.gone[l.GetValue()]
		}
	}
	return false
}
