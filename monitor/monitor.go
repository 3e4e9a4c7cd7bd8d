package monitor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keyhook/keyhook/events"
	"github.com/keyhook/keyhook/internal/keyspace"
	"github.com/keyhook/keyhook/subscription"
)

// Defaults of Config.
const (
	DefaultInterval         = time.Second
	DefaultDeadLetterWindow = 5 * time.Minute
	// clearTTL keeps a resume's mark this long when the subscription
	// sets no disable_after (it may set one later).
	clearTTL = 24 * time.Hour
)

// Pauser changes a subscription; subscription.Store implements it. The
// Monitor pauses through it as an operator's pause does.
type Pauser interface {
	Update(ctx context.Context, id string, expectedVersion int64, fn func(*subscription.Subscription) error) (*subscription.Subscription, error)
}

// Emitter takes operational events; *events.Emitter implements it.
type Emitter interface {
	Emit(events.Event)
}

// Config tunes a Monitor. The zero value of every field means its default.
type Config struct {
	// Interval is how often what was observed is written to Redis and
	// judged. Default 1s: a streak's start is known to every node within
	// it, and a pause comes that much after disable_after at most.
	Interval time.Duration
	// DeadLetterThreshold, when positive, emits
	// deadletters.threshold_exceeded once per window in which a
	// subscription's dead letters, over every node, reach it. Default 0:
	// off.
	DeadLetterThreshold int64
	// DeadLetterWindow is the length of those windows, aligned on the
	// clock. Default 5m.
	DeadLetterWindow time.Duration
	// Keyspace names the Redis keys. Default the default keyspace.
	Keyspace keyspace.Keyspace
	// Now is the clock a streak's length is judged by. Default time.Now;
	// tests move it forward instead of waiting for a disable_after.
	Now func() time.Time
	// Logger receives the pauses, once each, and failures. Default
	// slog.Default().
	Logger *slog.Logger
}

// Monitor adds up attempts and dead letters per subscription and writes
// them, once per interval, from the goroutine of Run. Its methods are
// safe for concurrent use.
type Monitor struct {
	cfg    Config
	rdb    redis.UniversalClient
	pauser Pauser
	emit   Emitter
	log    *slog.Logger

	// mu guards subs: what was observed since the last write, by
	// subscription id.
	mu   sync.Mutex
	subs map[string]*observed
}

// observed is one subscription's outcomes of the interval.
type observed struct {
	disableAfter time.Duration
	disableText  string
	endpoint     string
	// lastOK is the interval's last success; firstFail its first failure
	// after lastOK. Zero for none.
	lastOK, firstFail time.Time
	deadLetters       int64
}

// New builds a Monitor over rdb; emit may be nil (no events).
func New(rdb redis.UniversalClient, pauser Pauser, emit Emitter, cfg Config) (*Monitor, error) {
	if rdb == nil || pauser == nil {
		return nil, errors.New("monitor: a Redis client and a Pauser are required")
	}
	switch {
	case cfg.Interval < 0:
		return nil, errors.New("monitor: Interval must not be negative")
	case cfg.DeadLetterThreshold < 0:
		return nil, errors.New("monitor: DeadLetterThreshold must not be negative")
	case cfg.DeadLetterWindow < 0:
		return nil, errors.New("monitor: DeadLetterWindow must not be negative")
	}
	if err := cfg.Keyspace.Validate(); err != nil {
		return nil, fmt.Errorf("monitor: %w", err)
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.DeadLetterWindow == 0 {
		cfg.DeadLetterWindow = DefaultDeadLetterWindow
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if emit == nil {
		emit = (*events.Emitter)(nil)
	}
	return &Monitor{cfg: cfg, rdb: rdb, pauser: pauser, emit: emit, log: cfg.Logger, subs: make(map[string]*observed)}, nil
}

// Watches reports whether sub's attempts are worth telling: it sets a
// disable_after. The dispatcher asks once per subscription version.
func Watches(sub *subscription.Subscription) bool { return sub.DisableAfterDuration() > 0 }

// Attempt records one attempt's outcome for sub, made at at: ok when the
// endpoint answered 2xx. Only subscriptions that Watches are tracked.
func (m *Monitor) Attempt(sub *subscription.Subscription, ok bool, at time.Time) {
	d := sub.DisableAfterDuration()
	if d <= 0 {
		return
	}
	m.mu.Lock()
	o := m.entry(sub.ID)
	o.disableAfter, o.disableText = d, sub.DisableAfter
	if o.endpoint == "" {
		o.endpoint = origin(sub.Endpoint.URL)
	}
	switch {
	case ok && at.After(o.lastOK):
		o.lastOK = at
		if !o.firstFail.After(at) {
			o.firstFail = time.Time{}
		}
	case !ok && at.After(o.lastOK) && (o.firstFail.IsZero() || at.Before(o.firstFail)):
		o.firstFail = at
	}
	m.mu.Unlock()
}

// DeadLettered counts a dead letter of the subscription, when a threshold
// is set.
func (m *Monitor) DeadLettered(subscriptionID string) {
	if m.cfg.DeadLetterThreshold <= 0 {
		return
	}
	m.mu.Lock()
	m.entry(subscriptionID).deadLetters++
	m.mu.Unlock()
}

// entry is the subscription's observed entry, made when missing. Called
// under mu.
func (m *Monitor) entry(id string) *observed {
	o := m.subs[id]
	if o == nil {
		o = new(observed)
		m.subs[id] = o
	}
	return o
}

// Run writes and judges what was observed every interval until ctx ends,
// then writes once more. It returns nil.
func (m *Monitor) Run(ctx context.Context) error {
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			m.flush(fctx)
			cancel()
			return nil
		case <-t.C:
			m.flush(ctx)
		}
	}
}

// flush takes the interval's observations and writes them. What could not
// be written is lost, not retried: a failure goes on being observed.
func (m *Monitor) flush(ctx context.Context) {
	m.mu.Lock()
	if len(m.subs) == 0 {
		m.mu.Unlock()
		return
	}
	subs := m.subs
	m.subs = make(map[string]*observed, len(subs))
	m.mu.Unlock()
	for id, o := range subs {
		if o.disableAfter > 0 && (!o.lastOK.IsZero() || !o.firstFail.IsZero()) {
			m.streak(ctx, id, o)
		}
		if o.deadLetters > 0 {
			m.countDeadLetters(ctx, id, o.deadLetters)
		}
	}
}

// streak writes o's outcomes into the subscription's streak and pauses
// the subscription once the streak is disable_after long.
func (m *Monitor) streak(ctx context.Context, id string, o *observed) {
	ttl := 2*o.disableAfter + time.Hour
	since, err := streakScript.Run(ctx, m.rdb, []string{m.cfg.Keyspace.FailingStreak(id)},
		unixMS(o.lastOK), unixMS(o.firstFail), ttl.Milliseconds()).Int64()
	if err != nil {
		m.log.Warn("failing streak not written", "subscription", id, "err", err)
		return
	}
	if since == 0 || o.firstFail.IsZero() {
		return
	}
	start := time.UnixMilli(since).UTC()
	if m.cfg.Now().Sub(start) < o.disableAfter {
		return
	}
	m.pause(ctx, id, o, start)
}

// pause pauses the subscription as an operator's pause does, unless it is
// paused already or no longer sets disable_after; the node whose change
// is stored logs it and emits the event, once.
func (m *Monitor) pause(ctx context.Context, id string, o *observed, since time.Time) {
	reason := fmt.Sprintf("endpoint failing since %s (disable_after %s)", since.Format(time.RFC3339), o.disableText)
	paused := false
	_, err := m.pauser.Update(ctx, id, subscription.AnyVersion, func(cur *subscription.Subscription) error {
		paused = false
		if cur.Paused || cur.DisableAfterDuration() <= 0 {
			return nil // unchanged: nothing is stored
		}
		cur.Paused, cur.PausedBy, cur.PausedReason = true, subscription.PausedByAuto, reason
		paused = true
		return nil
	})
	switch {
	case errors.Is(err, subscription.ErrNotFound):
		return
	case err != nil:
		m.log.Error("subscription not paused; tried again at the next failure", "subscription", id, "reason", reason, "err", err)
		return
	case !paused:
		return
	}
	m.log.Warn("subscription paused: its endpoint kept failing; records wait until it is resumed",
		"subscription", id, "endpoint", o.endpoint, "failing_since", since, "disable_after", o.disableText)
	m.emit.Emit(events.SubscriptionAutoPaused(id, events.AutoPaused{
		FailingSince: since, DisableAfter: o.disableText, Reason: reason, Endpoint: o.endpoint,
	}))
}

// countDeadLetters adds n to the subscription's window; the node whose
// addition reaches the threshold emits the event, once per window.
func (m *Monitor) countDeadLetters(ctx context.Context, id string, n int64) {
	w := m.cfg.DeadLetterWindow
	start := m.cfg.Now().Truncate(w)
	key := m.cfg.Keyspace.DeadLetterWindow(id, start.Unix())
	var incr *redis.IntCmd
	_, err := m.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		incr = p.IncrBy(ctx, key, n)
		p.PExpire(ctx, key, 2*w)
		return nil
	})
	if err != nil {
		m.log.Warn("dead letters not counted", "subscription", id, "err", err)
		return
	}
	total, th := incr.Val(), m.cfg.DeadLetterThreshold
	if total >= th && total-n < th {
		m.log.Warn("dead letters past the threshold", "subscription", id, "count", total, "threshold", th, "window", w)
		m.emit.Emit(events.DeadLettersThresholdExceeded(id, events.DeadLetters{
			Count: total, Threshold: th, WindowStart: start.UTC(), WindowMS: w.Milliseconds(),
		}))
	}
}

// Clear ends the subscription's failing streak: a resume starts from
// nothing, and no failure observed before it starts a streak again.
func (m *Monitor) Clear(ctx context.Context, subscriptionID string) error {
	return Clear(ctx, m.rdb, m.cfg.Keyspace, subscriptionID, m.cfg.Now())
}

// Clear is Monitor.Clear for a process without a Monitor (an API node).
func Clear(ctx context.Context, rdb redis.UniversalClient, keys keyspace.Keyspace, subscriptionID string, now time.Time) error {
	err := clearScript.Run(ctx, rdb, []string{keys.FailingStreak(subscriptionID)}, now.UnixMilli(), clearTTL.Milliseconds()).Err()
	if err != nil {
		return fmt.Errorf("monitor: clear the failing streak of %s: %w", subscriptionID, err)
	}
	return nil
}

// Since returns the start of the subscription's failing streak, zero
// when its endpoint is not failing.
func Since(ctx context.Context, rdb redis.UniversalClient, keys keyspace.Keyspace, subscriptionID string) (time.Time, error) {
	v, err := rdb.HGet(ctx, keys.FailingStreak(subscriptionID), "since").Result()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("monitor: failing streak of %s: %w", subscriptionID, err)
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("monitor: failing streak of %s: %q is no time", subscriptionID, v)
	}
	return time.UnixMilli(ms).UTC(), nil
}

// Streaks clears failing streaks at a resume, for the API; it needs no
// Monitor.
type Streaks struct {
	RDB  redis.UniversalClient
	Keys keyspace.Keyspace
}

// Clear ends the subscription's failing streak (see Monitor.Clear).
func (s Streaks) Clear(ctx context.Context, subscriptionID string) error {
	return Clear(ctx, s.RDB, s.Keys, subscriptionID, time.Now())
}

// DeleteSubscription removes a deleted subscription's streak
// (control.StateDeleter); its dead-letter windows expire on their own.
func (s Streaks) DeleteSubscription(ctx context.Context, subscriptionID string) error {
	if err := s.RDB.Unlink(ctx, s.Keys.FailingStreak(subscriptionID)).Err(); err != nil {
		return fmt.Errorf("monitor: delete the failing streak of %s: %w", subscriptionID, err)
	}
	return nil
}

func unixMS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// origin is the URL's scheme://host[:port], never its path or query,
// which may carry credentials.
func origin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Scheme + "://" + u.Host
}
