package configlog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Target is one kind of entries in Redis, as its store exposes it to Run.
// Every method must be safe to call while the store serves other writes.
type Target interface {
	// Kind names the entries in the log's keys ("subscription").
	Kind() string
	// SnapshotEntries returns every entry Redis holds, by ID, with its
	// version and stored form.
	SnapshotEntries(ctx context.Context) (map[string]Entry, error)
	// RestoreEntry writes e to Redis unless Redis holds the entry at
	// version e.Version or above.
	RestoreEntry(ctx context.Context, e Entry) error
	// RemoveEntry removes the entry e.ID from Redis if Redis holds it
	// below version e.Version (e is a tombstone).
	RemoveEntry(ctx context.Context, e Entry) error
}

// Marked is implemented by a Target that can tell cheaply whether its
// entries changed: Mark returns a value that moves with every change its
// store makes (subscription.Store's set version). Run then snapshots such
// a target only when its mark or the log moved since a round that found
// nothing to do, and every fullEvery rounds whatever they say: a Redis
// that lost data, or was rolled back, shows as a mark that moved, and a
// change made behind the store's back is found by the full round.
type Marked interface {
	Mark(ctx context.Context) (string, error)
}

// fullEvery is how many rounds pass between two that snapshot every
// target whatever its mark says (30 s at the default interval).
const fullEvery = 30

// quiet is what a round that found a kind in step saw: the target's mark
// and the log's position. A later round that sees both unchanged skips
// the kind.
type quiet struct {
	mark string
	next int64
}

// state is the log as read so far: per kind, per id, the winning entry
// and the version of the last record read for it. Only Run's goroutine
// touches it.
type state struct {
	next    int64
	entries map[string]map[string]*logged
	// planned holds, per kind, the restores and removes (ID and version)
	// the previous round found.
	planned map[string]map[planKey]bool
	// quiet holds, per kind, what the last round that found it in step
	// saw; rounds counts the rounds, for fullEvery.
	quiet  map[string]quiet
	rounds int
}

// settled keeps, of p's restores and removes, those the previous round
// planned too, and remembers p's for the next round. A change the stores
// are making reaches the log a moment before Redis; acting on it in that
// moment would make the store's own compare-and-set fail. A difference
// that outlives a round is Redis's loss.
func (s *state) settled(kind string, p Plan) Plan {
	prev := s.planned[kind]
	now := make(map[planKey]bool, len(p.Restore)+len(p.Remove))
	keep := func(es []Entry) []Entry {
		var out []Entry
		for _, e := range es {
			k := planKey{e.ID, e.Version, e.Deleted()}
			now[k] = true
			if prev[k] {
				out = append(out, e)
			}
		}
		return out
	}
	p.Restore, p.Remove = keep(p.Restore), keep(p.Remove)
	s.planned[kind] = now
	return p
}

// planKey names a planned restore or remove.
type planKey struct {
	id      string
	version int64
	deleted bool
}

type logged struct {
	win  Entry
	last int64
}

func (s *state) apply(kind string, e Entry) {
	byID := s.entries[kind]
	if byID == nil {
		byID = make(map[string]*logged)
		s.entries[kind] = byID
	}
	cur, ok := byID[e.ID]
	if !ok {
		byID[e.ID] = &logged{win: e, last: e.Version}
		return
	}
	cur.last = e.Version
	if e.newer(cur.win) {
		cur.win = e
	}
}

// view returns the winning entries of kind.
func (s *state) view(kind string) map[string]Entry {
	out := make(map[string]Entry, len(s.entries[kind]))
	for id, l := range s.entries[kind] {
		out[id] = l.win
	}
	return out
}

// Run reads the log into memory and keeps Redis in step with it until ctx
// ends: at start and every Config.Interval it reads every target's
// entries, catches up with the log's end, and writes back, removes or
// appends what Reconcile says. A record read after one with a higher
// version (an adoption that raced a delete) is superseded: the winner is
// appended again, so that compaction, which keeps a key's last record,
// keeps it. Failures (Redis or Kafka unreachable) are logged and retried
// at the next interval; Run returns nil when ctx ends.
func (l *Log) Run(ctx context.Context, targets ...Target) error {
	st := &state{entries: make(map[string]map[string]*logged), planned: make(map[string]map[planKey]bool), quiet: make(map[string]quiet)}
	tick := time.NewTicker(l.cfg.Interval)
	defer tick.Stop()
	var failing bool
	for {
		err := l.reconcile(ctx, st, targets)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && !failing:
			l.cfg.Logger.Warn("config log: reconcile failed; retrying", "topic", l.cfg.Topic, "err", err)
			failing = true
		case err == nil && failing:
			l.cfg.Logger.Info("config log: reconcile recovered", "topic", l.cfg.Topic)
			failing = false
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// reconcile is one round: snapshot Redis, then catch up with the log, then
// compare. The order matters: a change the stores made reached the log
// before Redis, so every change the snapshot shows is in the log read up
// to an end taken after it, and nothing a snapshot shows is mistaken for
// a change the log lacks.
func (l *Log) reconcile(ctx context.Context, st *state, targets []Target) error {
	full := st.rounds%fullEvery == 0
	st.rounds++
	snaps := make([]map[string]Entry, len(targets))
	marks := make([]string, len(targets))
	skip := make([]bool, len(targets))
	for i, t := range targets {
		if m, ok := t.(Marked); ok {
			mark, err := m.Mark(ctx)
			if err != nil {
				return fmt.Errorf("configlog: read %s mark: %w", t.Kind(), err)
			}
			marks[i] = mark
			q, wasQuiet := st.quiet[t.Kind()]
			if !full && wasQuiet && q.mark == mark && q.next == st.next {
				skip[i] = true
				continue
			}
		}
		snap, err := t.SnapshotEntries(ctx)
		if err != nil {
			return fmt.Errorf("configlog: read %s entries: %w", t.Kind(), err)
		}
		snaps[i] = snap
	}
	before := st.next
	if err := l.catchUp(ctx, st); err != nil {
		return err
	}
	var errs []error
	for i, t := range targets {
		kind := t.Kind()
		if skip[i] {
			// Neither Redis nor the log moved since the kind was last
			// found in step; a log that moved during this round's read
			// is compared at the next.
			continue
		}
		delete(st.quiet, kind)
		found := Reconcile(st.view(kind), snaps[i])
		plan := st.settled(kind, found)
		var restored, removed, adopted int
		for _, e := range plan.Restore {
			if err := t.RestoreEntry(ctx, e); err != nil {
				errs = append(errs, fmt.Errorf("configlog: restore %s/%s: %w", kind, e.ID, err))
				continue
			}
			restored++
		}
		for _, e := range plan.Remove {
			if err := t.RemoveEntry(ctx, e); err != nil {
				errs = append(errs, fmt.Errorf("configlog: remove %s/%s: %w", kind, e.ID, err))
				continue
			}
			removed++
		}
		for _, e := range plan.Adopt {
			if err := l.write(ctx, kind, e.ID, e); err != nil {
				errs = append(errs, err)
				continue
			}
			st.apply(kind, e)
			adopted++
		}
		for id, lg := range st.entries[kind] {
			if lg.last >= lg.win.Version {
				continue
			}
			if err := l.write(ctx, kind, id, lg.win); err != nil {
				errs = append(errs, err)
				continue
			}
			lg.last = lg.win.Version
		}
		if !plan.Empty() {
			l.cfg.Logger.Info("config log: redis brought in step", "kind", kind,
				"restored", restored, "removed", removed, "adopted", adopted)
		}
		if found.Empty() && len(errs) == 0 && st.next == before {
			// In step, as of the mark read before the snapshot: a change
			// since moved the mark.
			st.quiet[kind] = quiet{mark: marks[i], next: st.next}
		}
	}
	return errors.Join(errs...)
}

// catchUpTimeout bounds how long one round reads the log towards its end.
const catchUpTimeout = 30 * time.Second

// catchUp reads the log until st holds every record written before the
// call.
func (l *Log) catchUp(ctx context.Context, st *state) error {
	ends, err := l.adm.ListEndOffsets(ctx, l.cfg.Topic)
	if err != nil {
		return fmt.Errorf("configlog: end offset: %w", err)
	}
	end, ok := ends.Lookup(l.cfg.Topic, 0)
	if !ok {
		return fmt.Errorf("configlog: end offset: topic %q has no partition 0", l.cfg.Topic)
	}
	if end.Err != nil {
		return fmt.Errorf("configlog: end offset: %w", end.Err)
	}
	ctx, cancel := context.WithTimeout(ctx, catchUpTimeout)
	defer cancel()
	for st.next < end.Offset {
		fetches := l.cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("configlog: read up to offset %d (at %d): %w", end.Offset, st.next, err)
		}
		var ferr error
		fetches.EachError(func(_ string, _ int32, err error) { ferr = errors.Join(ferr, err) })
		if ferr != nil {
			return fmt.Errorf("configlog: read: %w", ferr)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			st.next = r.Offset + 1
			if kind, e, ok := decode(r); ok {
				st.apply(kind, e)
				l.note(kind, e)
			}
		})
	}
	return nil
}
