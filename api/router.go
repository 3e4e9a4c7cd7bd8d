package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/keyhook/keyhook/auth"
	"github.com/keyhook/keyhook/console"
	"github.com/keyhook/keyhook/nodes"
	"github.com/keyhook/keyhook/subscription"
)

// DefaultMaxBodyBytes is the request body limit when Config.MaxBodyBytes
// is 0: 1 MiB.
const DefaultMaxBodyBytes = 1 << 20

// DefaultReadinessTimeout bounds each readiness check when
// Config.ReadinessTimeout is 0: 2 s.
const DefaultReadinessTimeout = 2 * time.Second

// URLChecker decides whether an endpoint URL may be registered, typically
// by resolving its host and refusing loopback, private, link-local and
// metadata addresses. webhooks.AddressPolicy implements it. The error's
// message is shown to the client as the reason, so it should say what is
// wrong with the URL in the client's terms.
type URLChecker interface {
	CheckURL(ctx context.Context, raw string) error
}

// StatusSource reports the delivery status of a subscription.
// control.StatusReader implements it.
type StatusSource interface {
	Status(ctx context.Context, s *subscription.Subscription) (*subscription.Status, error)
}

// SubscriptionStore is where subscriptions live. subscription.Store
// implements it; the errors it returns are the ones that type documents
// (ErrNotFound, ErrVersionMismatch, ErrIdempotencyKeyReused,
// ErrInvalidCursor, *ValidationError), wrapped.
type SubscriptionStore interface {
	Create(ctx context.Context, sub *subscription.Subscription) error
	CreateIdempotent(ctx context.Context, sub *subscription.Subscription, req subscription.Idempotency) (replayed bool, err error)
	Get(ctx context.Context, id string) (*subscription.Subscription, error)
	Page(ctx context.Context, req subscription.PageRequest) (*subscription.Page, error)
	Update(ctx context.Context, id string, expectedVersion int64, fn func(*subscription.Subscription) error) (*subscription.Subscription, error)
	DeleteVersion(ctx context.Context, id string, expectedVersion int64) error
}

// Seeker moves a subscription's consumer group to a new position.
// control.Seeker implements it: it stops the group's consumers,
// rewrites the commits and lets them resume. A request that Kafka refuses
// (an unknown partition) should be a *subscription.ValidationError; an
// unknown subscription, an error wrapping subscription.ErrNotFound.
type Seeker interface {
	Seek(ctx context.Context, sub *subscription.Subscription, req subscription.SeekRequest) (*subscription.SeekResult, error)
}

// StartResolver fixes where a new subscription starts reading, before it
// is stored and any node can consume its group. control.StartResolver
// implements it: for a "latest" subscription it commits the log end of
// every partition for the group of sub, whose ID is already assigned. An
// error means Kafka could not answer.
type StartResolver interface {
	ResolveStart(ctx context.Context, sub *subscription.Subscription) error
}

// DeadLetterSource lists and redrives a subscription's dead letters.
// deadletter.Reader implements it. DeadLetters returns the page after
// cursor ("" for the first), at most limit items; a cursor it did not
// make gives an error wrapping subscription.ErrInvalidCursor. Redrive
// queues the dead letters with the given ids (every one when ids is nil)
// for the owners of their source partitions, which send them again, and
// reports how many it queued; unknown ids are not counted.
type DeadLetterSource interface {
	DeadLetters(ctx context.Context, sub *subscription.Subscription, limit int, cursor string) (*subscription.DeadLetterPage, error)
	Redrive(ctx context.Context, sub *subscription.Subscription, ids []string) (int, error)
}

// Tester sends one synthetic delivery to a subscription's endpoint and
// reports what happened. WebhookTester implements it. An endpoint that
// fails is a result, not an error; an error means the test could not be
// run at all.
type Tester interface {
	Test(ctx context.Context, sub *subscription.Subscription, req TestRequest) (*TestResult, error)
}

// NodeLister lists the live nodes. nodes.Registry implements it.
type NodeLister interface {
	List(ctx context.Context) ([]nodes.Info, error)
}

// Authenticator recognises bearer tokens. auth.Store implements it: an
// unknown token gives an error wrapping auth.ErrInvalidToken; any other
// error means it could not tell.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (auth.Token, error)
}

// ReadinessCheck reports whether one backend answers; nil means ready.
type ReadinessCheck func(ctx context.Context) error

// Cleanup removes what a deleted subscription leaves behind (tracking
// state, consumer group, queued redrives) once its consumers stopped.
// control.Cleaner implements it: Schedule records the cleanup durably and
// returns; the cleanup itself runs later, on any API node.
type Cleanup interface {
	Schedule(ctx context.Context, subscriptionID string) error
}

// Dependencies are what the API is built on. Every field is required but
// Cleanup.
type Dependencies struct {
	Store       SubscriptionStore
	URLs        URLChecker
	Status      StatusSource
	Seeker      Seeker
	Starts      StartResolver
	DeadLetters DeadLetterSource
	Tester      Tester
	Nodes       NodeLister
	Auth        Authenticator
	Keys        KeySource
	// Cleanup, when not nil, is scheduled after each DELETE; without it a
	// deleted subscription's state stays in Redis and Kafka.
	Cleanup Cleanup
}

func (d Dependencies) validate() error {
	var missing []string
	for _, f := range []struct {
		name string
		nil  bool
	}{
		{"Store", d.Store == nil}, {"URLs", d.URLs == nil}, {"Status", d.Status == nil},
		{"Seeker", d.Seeker == nil}, {"Starts", d.Starts == nil}, {"DeadLetters", d.DeadLetters == nil}, {"Tester", d.Tester == nil},
		{"Nodes", d.Nodes == nil}, {"Auth", d.Auth == nil}, {"Keys", d.Keys == nil},
	} {
		if f.nil {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return errors.New("api: Dependencies." + strings.Join(missing, ", Dependencies.") + " required")
	}
	return nil
}

// Config holds the router's tunables. The zero value is ready to use.
type Config struct {
	// MaxBodyBytes bounds a request body; a larger one is answered with
	// 413 before it is decoded. Default (0 or less): DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Logger receives internal errors (the 500s, whose details clients
	// never see), failed readiness checks and recovered panics. Tokens
	// are never logged. Default (nil): slog.Default().
	Logger *slog.Logger
	// ReadinessChecks are run, concurrently, by GET /readyz, which
	// answers 200 when all pass and 503 naming the failing ones
	// otherwise. Names are shown to unauthenticated callers; errors are
	// only logged. Default: none (always ready).
	ReadinessChecks map[string]ReadinessCheck
	// ReadinessTimeout bounds each readiness check. Default (0):
	// DefaultReadinessTimeout.
	ReadinessTimeout time.Duration
	// Metrics, when not nil, is served at GET /metrics.
	Metrics http.Handler
	// MetricsPublic serves /metrics to anyone. Off by default: /metrics
	// names endpoint origins and subscription ids, so it needs a bearer
	// token with the metrics scope (or admin), which a scraper is given.
	// Turn it on only where the port is reachable by the scraper alone.
	MetricsPublic bool
	// Now is the clock, for ages in status answers. Default time.Now.
	Now func() time.Time
	// SchemaRegistry says the node has a Schema Registry
	// (--schema-registry-url): without one, a subscription whose
	// value_format or key_format is avro, protobuf or json_schema is
	// refused with 400 naming the field.
	SchemaRegistry bool
}

// NewRouter returns the HTTP handler of the whole API, as openapi.yaml
// describes it:
//
//	POST   /v1/subscriptions                               create (Idempotency-Key honoured)
//	GET    /v1/subscriptions                               list, paged (?limit=&cursor=&topic=)
//	GET    /v1/subscriptions/{id}                          one subscription, with its ETag
//	PUT    /v1/subscriptions/{id}                          replace (If-Match checked)
//	PATCH  /v1/subscriptions/{id}                          merge patch (If-Match checked)
//	DELETE /v1/subscriptions/{id}                          delete (If-Match checked)
//	POST   /v1/subscriptions/{id}/pause, /resume           stop or restart deliveries
//	POST   /v1/subscriptions/{id}/seek                     move the consumer group
//	POST   /v1/subscriptions/{id}/signing/rotate           new signing secret, old ones overlap
//	GET    /v1/subscriptions/{id}/status                   delivery status per partition
//	GET    /v1/subscriptions/{id}/keys                     keys not flowing (?state=&topic=&partition=&limit=)
//	POST   /v1/subscriptions/{id}/test                     one synthetic delivery
//	GET    /v1/subscriptions/{id}/dead-letters             dead letters, paged
//	POST   /v1/subscriptions/{id}/dead-letters/redrive     deliver dead letters again
//	GET    /v1/nodes                                       live nodes
//	GET    /v1/token                                       the caller's token: name and scopes
//	GET    /healthz, /readyz, /metrics                     liveness, readiness, metrics
//	GET    /console/                                       the operator console (static files)
//
// Every /v1 route needs a bearer token with the route's scope. Every
// error, unknown routes and methods included, is an RFC 9457
// application/problem+json body; the console's files, which hold no data
// and need no token (the page asks for one), are answered by the console
// package with its own headers. A missing dependency is an error naming
// it.
func NewRouter(deps Dependencies, cfg Config) (http.Handler, error) {
	if err := deps.validate(); err != nil {
		return nil, err
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ReadinessTimeout <= 0 {
		cfg.ReadinessTimeout = DefaultReadinessTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	h := &handlers{deps: deps, cfg: cfg, log: cfg.Logger}
	con, err := console.New()
	if err != nil {
		return nil, err
	}

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

	read := r.With(h.require(auth.ScopeRead))
	write := r.With(h.require(auth.ScopeWrite))

	// Flat routes, no sub-routers: chi's Match, which the 405 handler
	// relies on, only answers exactly for routes on one mux.
	r.Get("/healthz", h.healthz)
	r.Get("/readyz", h.readyz)
	if cfg.Metrics != nil {
		if cfg.MetricsPublic {
			r.Method(http.MethodGet, "/metrics", cfg.Metrics)
		} else {
			r.With(h.require(auth.ScopeMetrics)).Method(http.MethodGet, "/metrics", cfg.Metrics)
		}
	}
	write.Post("/v1/subscriptions", h.create)
	read.Get("/v1/subscriptions", h.list)
	read.Get("/v1/subscriptions/{id}", h.get)
	write.Put("/v1/subscriptions/{id}", h.replace)
	write.Patch("/v1/subscriptions/{id}", h.patch)
	write.Delete("/v1/subscriptions/{id}", h.delete)
	write.Post("/v1/subscriptions/{id}/pause", h.pause)
	write.Post("/v1/subscriptions/{id}/resume", h.resume)
	write.Post("/v1/subscriptions/{id}/seek", h.seek)
	write.Post("/v1/subscriptions/{id}/signing/rotate", h.rotateSigning)
	read.Get("/v1/subscriptions/{id}/status", h.getStatus)
	read.Get("/v1/subscriptions/{id}/keys", h.keys)
	write.Post("/v1/subscriptions/{id}/test", h.test)
	read.Get("/v1/subscriptions/{id}/dead-letters", h.deadLetters)
	write.Post("/v1/subscriptions/{id}/dead-letters/redrive", h.redrive)
	read.Get("/v1/nodes", h.nodes)
	read.Get("/v1/token", h.token)
	r.Method(http.MethodGet, "/console", con)
	r.Method(http.MethodGet, console.Prefix+"*", con)
	r.Method(http.MethodHead, console.Prefix+"*", con)
	return r, nil
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
