package api

import (
	"context"
	"net/http"
	"slices"
	"sync"

	"github.com/keyhook/keyhook/subscription"
)

// readyResponse is /readyz's answer when every check passes.
type readyResponse struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
}

func (h *handlers) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz runs every readiness check concurrently, each within
// ReadinessTimeout. A failure's cause is logged, not shown: /readyz is
// unauthenticated and causes name addresses.
func (h *handlers) readyz(w http.ResponseWriter, r *http.Request) {
	names := make([]string, 0, len(h.cfg.ReadinessChecks))
	for name := range h.cfg.ReadinessChecks {
		names = append(names, name)
	}
	slices.Sort(names)
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(r.Context(), h.cfg.ReadinessTimeout)
			defer cancel()
			errs[i] = h.cfg.ReadinessChecks[name](ctx)
		})
	}
	wg.Wait()
	checks := make(map[string]string, len(names))
	var failed []subscription.FieldError
	for i, name := range names {
		if errs[i] != nil {
			h.log.WarnContext(r.Context(), "api: readiness check failed", "check", name, "error", errs[i])
			failed = append(failed, subscription.FieldError{Field: name, Message: "is not answering"})
			continue
		}
		checks[name] = "ok"
	}
	if len(failed) > 0 {
		writeProblem(w, newProblem(http.StatusServiceUnavailable, slugNotReady, "a backend this node needs is not answering", failed...))
		return
	}
	writeJSON(w, http.StatusOK, readyResponse{Status: "ready", Checks: checks})
}
