package api

import (
	"context"
	"log/slog"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/keyhook/keyhook/subscription"
)

// DefaultMaxBodyBytes is the request body limit when Config.MaxBodyBytes
// is 0: 1 MiB.
const DefaultMaxBodyBytes = 1 << 20

// URLChecker decides whether an endpoint URL may be registered, typically
// by resolving its host and refusing loopback, private, link-local and
// metadata addresses. webhooks.AddressPolicy implements it. The error's
// message is shown to the client as the reason, so it should say what is
// wrong with the URL in the client's terms.
type URLChecker interface {
	CheckURL(ctx context.Context, raw string) error
}

// StatusSource reports the delivery status of a subscription. The
// dispatcher implements it.
type StatusSource interface {
	Status(ctx context.Context, s *subscription.Subscription) (*subscription.Status, error)
}

// SubscriptionStore is where subscriptions live. subscription.Store
// implements it. Get and Delete must return an error wrapping
// subscription.ErrNotFound for an unknown id.
type SubscriptionStore interface {
	Create(ctx context.Context, sub *subscription.Subscription) error
	Get(ctx context.Context, id string) (*subscription.Subscription, error)
	List(ctx context.Context) ([]*subscription.Subscription, error)
	Delete(ctx context.Context, id string) error
}

// Config holds the router's tunables. The zero value is ready to use.
type Config struct {
	// MaxBodyBytes bounds a request body; a larger one is answered with
	// 413 before it is decoded. Default (0 or less): DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Logger receives internal errors (the 500s, whose details clients
	// never see) and recovered panics. Default (nil): slog.Default().
	Logger *slog.Logger
}

// NewRouter returns the HTTP handler of the whole API:
//
//	POST   /v1/subscriptions              register; 201, Location, the stored subscription
//	GET    /v1/subscriptions              {"items": [...]}, oldest first
//	GET    /v1/subscriptions/{id}         one subscription
//	DELETE /v1/subscriptions/{id}         204
//	GET    /v1/subscriptions/{id}/status  its delivery status, from status
//	GET    /healthz                       200 {"status":"ok"}
//
// Every error, unknown routes and methods included, is an RFC 9457
// application/problem+json body. store, urls and status are required; a
// nil one panics here rather than on the first request.
func NewRouter(store SubscriptionStore, urls URLChecker, status StatusSource, cfg Config) http.Handler {
	if store == nil || urls == nil || status == nil {
		panic("api: NewRouter: store, urls and status are required")
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	h := &handlers{store: store, urls: urls, status: status, maxBody: cfg.MaxBodyBytes, log: cfg.Logger}

	r := chi.NewRouter()
	r.Use(h.recoverer)
	r.NotFound(func(w http.ResponseWriter, req *http.Request) {
		writeProblem(w, newProblem(http.StatusNotFound, slugNotFound, "no resource at "+req.URL.Path))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		allowed := allowedMethods(r, req)
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		writeProblem(w, newProblem(http.StatusMethodNotAllowed, slugMethodNotAllowed,
			req.Method+" is not allowed here; allowed: "+strings.Join(allowed, ", ")))
	})

	// Flat routes, no sub-routers: chi's Match, which the 405 handler
	// relies on, only answers exactly for routes on one mux.
	r.Get("/healthz", h.healthz)
	r.Post("/v1/subscriptions", h.create)
	r.Get("/v1/subscriptions", h.list)
	r.Get("/v1/subscriptions/{id}", h.get)
	r.Delete("/v1/subscriptions/{id}", h.delete)
	r.Get("/v1/subscriptions/{id}/status", h.getStatus)
	return r
}

// allowedMethods lists the methods routed for req's path, for the Allow
// header that RFC 9110 requires on a 405 (chi hands a custom 405 handler
// no such list).
func allowedMethods(r *chi.Mux, req *http.Request) []string {
	var allowed []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if r.Match(chi.NewRouteContext(), m, req.URL.Path) {
			allowed = append(allowed, m)
		}
	}
	return allowed
}
