package webhooks

import (
	"maps"
	"net/http"
	"net/textproto"
	"sync/atomic"
)

// headerSet fills an http.Header whose every name has one value, taking
// the values' one-element slices from one backing array: a request's
// headers then cost one allocation for their slices instead of one each.
// Names must be in canonical form already (see [nameCache]).
type headerSet struct {
	h    http.Header
	vals []string
}

func newHeaderSet(n int) headerSet {
	return headerSet{h: make(http.Header, n), vals: make([]string, 0, n)}
}

// set sets name, canonical, to v alone.
func (s *headerSet) set(name, v string) {
	s.vals = append(s.vals, v)
	i := len(s.vals) - 1
	// A full slice expression: appending to one name's values must copy,
	// never write into the next name's.
	s.h[name] = s.vals[i : i+1 : i+1]
}

// add adds v to name, canonical.
func (s *headerSet) add(name, v string) {
	if vs, ok := s.h[name]; ok {
		s.h[name] = append(vs, v)
		return
	}
	s.set(name, v)
}

// maxCachedNames bounds a nameCache: header names come from producers'
// records, and a topic whose headers are all different must not grow the
// cache without limit. Past the bound, names are built on every use.
const maxCachedNames = 512

// nameCache turns a suffix into the canonical header name prefix+suffix,
// remembering the answers so that the names every record repeats (its
// attributes, the same few record headers) are built once, not per
// request. Reads take no lock: the map is replaced, never changed.
type nameCache struct {
	prefix string
	names  atomic.Pointer[map[string]string]
}

func (c *nameCache) name(suffix string) string {
	old := c.names.Load()
	if old != nil {
		if n, ok := (*old)[suffix]; ok {
			return n
		}
	}
	n := textproto.CanonicalMIMEHeaderKey(c.prefix + suffix)
	if old == nil || len(*old) < maxCachedNames {
		next := make(map[string]string, 1+lenOf(old))
		if old != nil {
			maps.Copy(next, *old)
		}
		next[suffix] = n
		// A lost race drops this answer; the next use builds it again.
		c.names.CompareAndSwap(old, &next)
	}
	return n
}

func lenOf(m *map[string]string) int {
	if m == nil {
		return 0
	}
	return len(*m)
}

var (
	attributeNames    = &nameCache{prefix: "Keyhook-"}
	recordHeaderNames = &nameCache{prefix: HeaderRecordPrefix}
)
