package configlog

import "slices"

// Entry is one configuration item — a subscription, a token — as the log
// or Redis holds it.
type Entry struct {
	// ID names the entry within its kind (a subscription id, a token
	// hash).
	ID string
	// Version only grows over the entry's life; a delete has a version
	// above the last one it deleted.
	Version int64
	// Data is the entry's stored form, byte for byte what Redis holds;
	// nil for a deleted entry (a tombstone).
	Data []byte
}

// Deleted reports whether e is a tombstone.
func (e Entry) Deleted() bool { return e.Data == nil }

// newer reports whether a record e read after cur replaces it: the higher
// version wins, and of two records with one version the later one.
func (e Entry) newer(cur Entry) bool { return e.Version >= cur.Version }

// Plan is what reconciling one kind of entries must do.
type Plan struct {
	// Restore are entries to write to Redis: it lacks them or holds an
	// older version.
	Restore []Entry
	// Remove are tombstones whose entries Redis still holds at an older
	// version.
	Remove []Entry
	// Adopt are entries Redis holds that the log does not know, or knows
	// at an older version: they are appended to the log.
	Adopt []Entry
}

// Empty reports whether p does nothing.
func (p Plan) Empty() bool { return len(p.Restore)+len(p.Remove)+len(p.Adopt) == 0 }

// Reconcile compares the log's view of one kind of entries with Redis's,
// by version, and returns what makes them agree. Each list is sorted by
// ID. Entries with the same version on both sides are left alone.
func Reconcile(log, redis map[string]Entry) Plan {
	var p Plan
	for id, l := range log {
		r, inRedis := redis[id]
		switch {
		case l.Deleted():
			if inRedis && r.Version < l.Version {
				p.Remove = append(p.Remove, l)
			} else if inRedis {
				// Redis holds the entry at or above the delete: written
				// again after it, behind the log's back.
				p.Adopt = append(p.Adopt, r)
			}
		case !inRedis || r.Version < l.Version:
			p.Restore = append(p.Restore, l)
		case r.Version > l.Version:
			p.Adopt = append(p.Adopt, r)
		}
	}
	for id, r := range redis {
		if _, ok := log[id]; !ok {
			p.Adopt = append(p.Adopt, r)
		}
	}
	byID := func(a, b Entry) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	}
	slices.SortFunc(p.Restore, byID)
	slices.SortFunc(p.Remove, byID)
	slices.SortFunc(p.Adopt, byID)
	return p
}
