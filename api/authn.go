package api

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/keyhook/keyhook/auth"
)

// realm names the protection space in WWW-Authenticate challenges.
const realm = `Bearer realm="keyhook"`

// require answers a request without a valid bearer token carrying scope
// with 401, and one whose token lacks scope with 403, before the handler
// sees it (so before its body is read). An empty scope accepts any valid
// token. The token is never logged, not even when the store fails. The
// handler finds the token's record (never its value) with caller.
func (h *handlers) require(scope auth.Scope) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			secret, ok := bearer(r.Header.Get("Authorization"))
			if !ok {
				w.Header().Set("WWW-Authenticate", realm)
				writeProblem(w, newProblem(http.StatusUnauthorized, slugUnauthorized,
					"this request needs an Authorization: Bearer <token> header"))
				return
			}
			tok, err := h.deps.Auth.Authenticate(r.Context(), secret)
			switch {
			case errors.Is(err, auth.ErrInvalidToken):
				w.Header().Set("WWW-Authenticate", realm+`, error="invalid_token"`)
				writeProblem(w, newProblem(http.StatusUnauthorized, slugUnauthorized,
					"the bearer token is not valid: unknown, revoked or mistyped"))
				return
			case err != nil:
				h.internal(w, r, "authenticate", err)
				return
			}
			if scope != "" && !tok.Allows(scope) {
				w.Header().Set("WWW-Authenticate", realm+`, error="insufficient_scope", scope="`+string(scope)+`"`)
				writeProblem(w, newProblem(http.StatusForbidden, slugInsufficientScope,
					"this request needs a token with the "+string(scope)+" scope (or admin)"))
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tokenKey{}, tok)))
		})
	}
}

// tokenKey is the context key of the auth.Token that require accepted.
type tokenKey struct{}

// caller returns the record of the token that require authenticated for
// r; ok is false behind no require.
func caller(r *http.Request) (tok auth.Token, ok bool) {
	tok, ok = r.Context().Value(tokenKey{}).(auth.Token)
	return tok, ok
}

// allows reports whether the token that require accepted for r carries
// scope (or admin). A request that went through no require allows
// nothing.
func allows(r *http.Request, scope auth.Scope) bool {
	tok, ok := caller(r)
	return ok && tok.Allows(scope)
}

// bearer extracts the token of an "Authorization: Bearer <token>" header
// (RFC 6750; the scheme is case-insensitive).
func bearer(header string) (string, bool) {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}
