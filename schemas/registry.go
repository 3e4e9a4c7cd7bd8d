package schemas

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/keyhook/keyhook/internal/backoff"
	"github.com/keyhook/keyhook/recordexpr"
)

// Defaults of Config.
const (
	DefaultCacheSize = 1000
	DefaultTimeout   = 10 * time.Second
	// unknownFor is how long an id the registry answered 404 for is
	// answered unknown without asking again.
	unknownFor = 30 * time.Second
)

// Config says how to reach the registry. Only URL is required.
type Config struct {
	// URL is the registry's base URL, such as http://registry:8081 (for
	// Apicurio, its /apis/ccompat/v7).
	URL string
	// Username and Password, when Username is set, authenticate with HTTP
	// basic auth; BearerToken, when set, with a bearer token.
	Username, Password string
	BearerToken        string
	// TLS configures https URLs (a CA, a client certificate). Nil means
	// the system's roots.
	TLS *tls.Config
	// CacheSize bounds the schemas kept, by id. Default 1000.
	CacheSize int
	// Timeout bounds one request. Default 10s.
	Timeout time.Duration
	// Backoff spaces the retries of a failed fetch (default
	// backoff.Config's defaults: 100ms doubling up to 10s).
	Backoff backoff.Config
	// Logger receives one warning when the registry stops answering and
	// one notice when it answers again. Default slog.Default().
	Logger *slog.Logger
	// MeterProvider receives keyhook.schema_registry.errors. Default:
	// no-op.
	MeterProvider metric.MeterProvider
}

// Registry is the node's Schema Registry client: the cache of schemas by
// id and the fetches filling it. It is safe for concurrent use. Its fetch
// goroutines are its own; Close stops them.
type Registry struct {
	cl     *sr.Client
	url    string
	cfg    Config
	log    *slog.Logger
	errors metric.Int64Counter
	// ctx ends the fetches (Close); wg counts them.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// mu guards what follows.
	mu sync.RWMutex
	// cache holds the schemas fetched, order their ids oldest first (the
	// first evicted when the cache is full).
	cache map[int]*Schema
	order []int
	// fetches are the ids being fetched, or answered unknown lately.
	fetches map[int]*fetch
	// outage is the registry's failure since it last answered, nil while
	// it answers.
	outage *outage
}

// fetch is one id's fetch. done is closed when it ends, with err set
// (under Registry.mu) when the id is unknown; last is its latest failure.
type fetch struct {
	done  chan struct{}
	err   error
	ended time.Time
	last  error
}

// outage is a registry that does not answer.
type outage struct {
	since time.Time
	err   error
}

// New returns a client of the registry at cfg.URL. It checks the
// configuration, not the registry: a registry down at start is retried
// like one that goes down later.
func New(cfg Config) (*Registry, error) {
	if cfg.URL == "" {
		return nil, errors.New("schemas: URL is required")
	}
	if !strings.HasPrefix(cfg.URL, "http://") && !strings.HasPrefix(cfg.URL, "https://") {
		return nil, fmt.Errorf("schemas: URL %q must start with http:// or https://", cfg.URL)
	}
	if err := cfg.Backoff.Validate(); err != nil {
		return nil, fmt.Errorf("schemas: Backoff: %w", err)
	}
	if cfg.CacheSize <= 0 {
		cfg.CacheSize = DefaultCacheSize
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = noop.NewMeterProvider()
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg.TLS
	opts := []sr.ClientOpt{
		sr.URLs(cfg.URL),
		sr.HTTPClient(&http.Client{Timeout: cfg.Timeout, Transport: tr}),
		sr.UserAgent("keyhook"),
	}
	if cfg.Username != "" {
		opts = append(opts, sr.BasicAuth(cfg.Username, cfg.Password))
	}
	if cfg.BearerToken != "" {
		opts = append(opts, sr.BearerToken(cfg.BearerToken))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("schemas: %w", err)
	}
	errs, err := cfg.MeterProvider.Meter("github.com/keyhook/keyhook/schemas").Int64Counter("keyhook.schema_registry.errors",
		metric.WithDescription("Requests to the Schema Registry that failed (an error status other than 404, a timeout, a refused connection); each is retried with backoff."),
		metric.WithUnit("{error}"))
	if err != nil {
		return nil, fmt.Errorf("schemas: metrics: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Registry{
		cl: cl, url: strings.TrimSuffix(cfg.URL, "/"), cfg: cfg, log: cfg.Logger, errors: errs,
		ctx: ctx, cancel: cancel,
		cache: make(map[int]*Schema), fetches: make(map[int]*fetch),
	}, nil
}

// Close stops the fetches under way and waits for them.
func (r *Registry) Close() {
	r.cancel()
	r.wg.Wait()
}

// URL is the registry's base URL, without a trailing slash.
func (r *Registry) URL() string { return r.url }

// Outage is the registry's failure since it last answered: zero since
// and nil err while it answers.
func (r *Registry) Outage() (since time.Time, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.outage == nil {
		return time.Time{}, nil
	}
	return r.outage.since, r.outage.err
}

// ErrUnknownSchema is wrapped by the error of an id the registry does not
// know (with recordexpr.ErrDecode: such a record cannot be delivered).
var ErrUnknownSchema = errors.New("schemas: unknown schema id")

// unknownError is an id the registry answered 404 for.
type unknownError struct {
	what string
	err  error
}

func (e *unknownError) Error() string {
	return e.what + " is unknown to the registry (" + e.err.Error() + ")"
}

func (e *unknownError) Unwrap() []error {
	return []error{recordexpr.ErrDecode, ErrUnknownSchema, e.err}
}

// Lookup returns the schema of id when it is cached. Otherwise it starts
// its fetch, when none is under way, and returns an error wrapping
// recordexpr.ErrNotReady, or one wrapping ErrUnknownSchema and
// recordexpr.ErrDecode when the registry answered lately that it does not
// know id. It never waits.
func (r *Registry) Lookup(id int) (*Schema, error) {
	s, _, err := r.lookup(id)
	return s, err
}

// lookup is Lookup, with the fetch under way when there is one.
func (r *Registry) lookup(id int) (*Schema, *fetch, error) {
	// The cache is read by every partition's worker for every record:
	// a read lock, the write lock only when it misses.
	r.mu.RLock()
	s, ok := r.cache[id]
	r.mu.RUnlock()
	if ok {
		return s, nil, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.cache[id]; ok {
		return s, nil, nil
	}
	if r.ctx.Err() != nil {
		return nil, nil, fmt.Errorf("%w: schema %d: the registry client is closed", recordexpr.ErrNotReady, id)
	}
	f, ok := r.fetches[id]
	if ok && f.err != nil {
		if time.Since(f.ended) < unknownFor {
			return nil, nil, f.err
		}
		ok = false
	}
	if !ok {
		f = &fetch{done: make(chan struct{})}
		r.fetches[id] = f
		r.wg.Add(1)
		go r.fetch(id, f)
	}
	if f.last != nil {
		return nil, f, fmt.Errorf("%w: schema %d: the registry does not answer: %v", recordexpr.ErrNotReady, id, f.last)
	}
	return nil, f, fmt.Errorf("%w: schema %d is being fetched", recordexpr.ErrNotReady, id)
}

// Get returns the schema of id, waiting for its fetch, bounded by ctx.
func (r *Registry) Get(ctx context.Context, id int) (*Schema, error) {
	for {
		s, f, err := r.lookup(id)
		if f == nil {
			return s, err
		}
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (%w)", err, context.Cause(ctx))
		}
	}
}

// fetch fetches id until the registry answers, or Close; it owns f until
// it closes f.done.
func (r *Registry) fetch(id int, f *fetch) {
	defer r.wg.Done()
	b := backoff.MustNew(r.cfg.Backoff)
	for {
		s, err := r.load(r.ctx, id)
		if r.ctx.Err() != nil {
			r.mu.Lock()
			delete(r.fetches, id)
			r.mu.Unlock()
			close(f.done)
			return
		}
		var final bool
		if err != nil {
			final = errors.Is(err, recordexpr.ErrDecode)
			if !final {
				r.failed(f, err)
				_ = b.Wait(r.ctx, 0) // Close ends it: the loop returns above
				continue
			}
		}
		r.mu.Lock()
		r.answered()
		if final {
			f.err, f.ended = err, time.Now()
		} else {
			delete(r.fetches, id)
			r.put(id, s)
		}
		r.mu.Unlock()
		close(f.done)
		return
	}
}

// put caches s as id's, evicting the oldest when full. r.mu is held.
func (r *Registry) put(id int, s *Schema) {
	for len(r.order) >= r.cfg.CacheSize {
		delete(r.cache, r.order[0])
		r.order = r.order[1:]
	}
	r.cache[id] = s
	r.order = append(r.order, id)
}

// failed notes a fetch that failed for a reason that may pass: counted,
// and logged once per outage.
func (r *Registry) failed(f *fetch, err error) {
	r.errors.Add(context.Background(), 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	f.last = err
	if r.outage == nil {
		r.outage = &outage{since: time.Now(), err: err}
		r.log.Warn("schema registry does not answer; records whose schemas are not cached wait, and are retried with backoff",
			"url", r.url, "error", err)
		return
	}
	r.outage.err = err
}

// answered ends an outage. r.mu is held.
func (r *Registry) answered() {
	if r.outage != nil {
		r.log.Info("schema registry answers again", "url", r.url, "down_for", time.Since(r.outage.since).Round(time.Millisecond).String())
		r.outage = nil
	}
}

// load fetches and parses the schema of id, with its references. Its
// error wraps recordexpr.ErrDecode when retrying cannot help: the id is
// unknown, or its schema does not parse.
func (r *Registry) load(ctx context.Context, id int) (*Schema, error) {
	s, err := r.cl.SchemaByID(ctx, id)
	if err != nil {
		return nil, r.requestError(id, err)
	}
	refs, err := r.references(ctx, s.References, nil, map[string]bool{})
	if err != nil {
		return nil, err
	}
	p, err := parse(id, s, refs)
	if err != nil {
		return nil, &parseError{id: id, err: err}
	}
	p.URI = r.url + "/schemas/ids/" + strconv.Itoa(id)
	return p, nil
}

// named is a schema a reference names.
type named struct {
	name   string
	schema sr.Schema
}

// references appends to out the schemas refs name, each after the ones it
// references in turn (the order Avro parses them in); seen guards
// against cycles.
func (r *Registry) references(ctx context.Context, refs []sr.SchemaReference, out []named, seen map[string]bool) ([]named, error) {
	for _, ref := range refs {
		if seen[ref.Name] {
			continue
		}
		seen[ref.Name] = true
		ss, err := r.cl.SchemaByVersion(ctx, ref.Subject, ref.Version)
		if err != nil {
			return nil, r.requestError(0, fmt.Errorf("reference %q (subject %q version %d): %w", ref.Name, ref.Subject, ref.Version, err))
		}
		if out, err = r.references(ctx, ss.References, out, seen); err != nil {
			return nil, err
		}
		out = append(out, named{ref.Name, ss.Schema})
	}
	return out, nil
}

// requestError classifies a failed request: a 404 is final (wrapping
// ErrUnknownSchema and recordexpr.ErrDecode), anything else may pass.
func (r *Registry) requestError(id int, err error) error {
	var re *sr.ResponseError
	if errors.As(err, &re) && re.StatusCode == http.StatusNotFound {
		what := "schema id " + strconv.Itoa(id)
		if id == 0 {
			what = "a reference"
		}
		return &unknownError{what: what, err: err}
	}
	return err
}

// parseError is a schema that does not parse: final, like an unknown id.
type parseError struct {
	id  int
	err error
}

func (e *parseError) Error() string   { return fmt.Sprintf("schema %d does not parse: %v", e.id, e.err) }
func (e *parseError) Unwrap() []error { return []error{recordexpr.ErrDecode, e.err} }
