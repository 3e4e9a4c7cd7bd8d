package api

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/keyhook/keyhook/subscription"
)

// etag is the entity tag of a subscription's representation: it changes
// exactly when the version does, and differs between subscriptions, so a
// tag from one subscription never matches another. It is strong: one
// version has one representation.
func etag(s *subscription.Subscription) string {
	return `"` + s.ID + ".v" + strconv.FormatInt(s.Version, 10) + `"`
}

// ifMatch is a parsed If-Match header.
type ifMatch struct {
	present bool
	any     bool
	tags    []string
}

// parseIfMatch reads the If-Match header (RFC 9110, 13.1.1): "*" or a
// comma-separated list of entity tags. Weak tags are kept but never match,
// as If-Match uses the strong comparison.
func parseIfMatch(r *http.Request) ifMatch {
	values := r.Header.Values("If-Match")
	if len(values) == 0 {
		return ifMatch{}
	}
	m := ifMatch{present: true}
	for _, v := range values {
		for _, t := range strings.Split(v, ",") {
			t = strings.TrimSpace(t)
			switch {
			case t == "*":
				m.any = true
			case t != "":
				m.tags = append(m.tags, t)
			}
		}
	}
	return m
}

// expectedVersion resolves the precondition against the current
// subscription: the version the change must apply to, and whether the
// precondition holds. No If-Match, or "*", means any version (the
// subscription must exist, which the store checks).
func (m ifMatch) expectedVersion(cur *subscription.Subscription) (int64, bool) {
	if !m.present || m.any {
		return subscription.AnyVersion, true
	}
	want := etag(cur)
	for _, t := range m.tags {
		if t == want {
			return cur.Version, true
		}
	}
	return 0, false
}

func preconditionFailed(cur *subscription.Subscription) *problem {
	return newProblem(http.StatusPreconditionFailed, slugPreconditionFailed,
		"If-Match does not match the current version "+etag(cur)+"; fetch the subscription again and retry")
}
