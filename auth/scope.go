package auth

import (
	"fmt"
	"slices"
	"strings"
)

// Scope is a permission a token carries.
type Scope string

const (
	// ScopeRead allows reading subscriptions, their status and dead
	// letters, and the node list.
	ScopeRead Scope = "subscriptions:read"
	// ScopeWrite allows changing subscriptions: create, replace, patch,
	// delete, pause, resume, seek, test deliveries and redrive.
	ScopeWrite Scope = "subscriptions:write"
	// ScopeMetrics allows scraping GET /metrics, and nothing else: the
	// scope to give a Prometheus scraper.
	ScopeMetrics Scope = "metrics"
	// ScopeAdmin implies every other scope.
	ScopeAdmin Scope = "admin"
)

// allScopes lists every scope, in the order they are shown.
var allScopes = []Scope{ScopeRead, ScopeWrite, ScopeMetrics, ScopeAdmin}

// Known reports whether s is one of the scopes above.
func (s Scope) Known() bool { return slices.Contains(allScopes, s) }

// ParseScopes reads a comma-separated list such as
// "subscriptions:read,subscriptions:write". Spaces around entries are
// ignored, duplicates dropped; the result is sorted in a fixed order. An
// empty list or an unknown scope is an error naming the known ones.
func ParseScopes(list string) ([]Scope, error) {
	var out []Scope
	for _, part := range strings.Split(list, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		s := Scope(part)
		if !s.Known() {
			return nil, fmt.Errorf("auth: unknown scope %q; known: %s", part, knownList())
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("auth: no scope given; known: %s", knownList())
	}
	return normalizeScopes(out), nil
}

// normalizeScopes sorts scopes in allScopes' order without duplicates.
func normalizeScopes(scopes []Scope) []Scope {
	out := make([]Scope, 0, len(scopes))
	for _, s := range allScopes {
		if slices.Contains(scopes, s) {
			out = append(out, s)
		}
	}
	return out
}

func knownList() string {
	names := make([]string, len(allScopes))
	for i, s := range allScopes {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}
