package subscription

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// view is Watch's copy of the set: each subscription with the JSON it was
// decoded from, so that a listing decodes only what changed since the
// last, and an announced change is applied by itself. Every node lists
// and decodes the whole set on every change otherwise: creating 1,000
// subscriptions made each node decode half a million. Only Watch's
// goroutine uses it.
type view struct {
	byID map[string]viewEntry
	// version is the set's version the view holds every change up to; a
	// subscription may be newer (read after a later change to it).
	version int64
	listed  bool
	// sorted is the set in List's order, nil once a change made it stale.
	sorted []*Subscription
}

type viewEntry struct {
	raw string
	sub *Subscription
}

// replace makes all, the whole set at version, the view. A subscription
// whose JSON did not change keeps its decoded value.
func (v *view) replace(all map[string]string, version int64) error {
	next := make(map[string]viewEntry, len(all))
	for id, raw := range all {
		if e, ok := v.byID[id]; ok && e.raw == raw {
			next[id] = e
			continue
		}
		sub, err := decode(id, []byte(raw))
		if err != nil {
			return fmt.Errorf("subscription: list: %w", err)
		}
		next[id] = viewEntry{raw: raw, sub: sub}
	}
	v.byID, v.version, v.listed, v.sorted = next, version, true, nil
	return nil
}

// put stores one subscription as read after a change to it.
func (v *view) put(id, raw string) error {
	if e, ok := v.byID[id]; ok && e.raw == raw {
		return nil
	}
	sub, err := decode(id, []byte(raw))
	if err != nil {
		return fmt.Errorf("subscription: read %q: %w", id, err)
	}
	v.byID[id] = viewEntry{raw: raw, sub: sub}
	v.sorted = nil
	return nil
}

// remove drops a subscription found deleted after a change to it.
func (v *view) remove(id string) {
	if _, ok := v.byID[id]; ok {
		delete(v.byID, id)
		v.sorted = nil
	}
}

// subs returns the set in List's order. The slice and its values are
// shared with the calls before and after it that saw them unchanged.
func (v *view) subs() []*Subscription {
	if v.sorted == nil {
		v.sorted = make([]*Subscription, 0, len(v.byID))
		for _, e := range v.byID {
			v.sorted = append(v.sorted, e.sub)
		}
		sortSubs(v.sorted)
	}
	return v.sorted
}

// sortSubs sorts subs as List returns them: by creation, then id.
func sortSubs(subs []*Subscription) {
	slices.SortFunc(subs, func(a, b *Subscription) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
}

// changeOf reads an announcement of the change feed: "<id> <version>",
// the set's version the change made. ok is false for one without a
// version (a node of an earlier release announces the id alone), which
// a watcher answers by listing the set.
func changeOf(payload string) (id string, version int64, ok bool) {
	id, ver, found := strings.Cut(payload, " ")
	if !found || id == "" {
		return "", 0, false
	}
	version, err := strconv.ParseInt(ver, 10, 64)
	if err != nil || version <= 0 {
		return "", 0, false
	}
	return id, version, true
}
