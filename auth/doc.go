// Package auth owns keyhook's API tokens: their format, their scopes, and
// the Redis store that keeps them, hashed, with a name, scopes, a creation
// time and a best-effort last-used time.
//
// A token is "kh_" followed by the unpadded base64url of 32 random bytes.
// Only its SHA-256 is stored; a token is recognised by looking that hash
// up, so no secret is ever compared byte by byte and a leaked store
// reveals no usable token. The token itself is shown once, when created.
//
// With a config log (Config.Log), every change — create, ensure, revoke —
// is recorded there first, keyed by the token's hash and versioned by the
// time of the change, and the Store is the log's Target for tokens, so a
// Redis that lost tokens gets them back and never a revoked one.
//
// The package knows Redis and nothing of HTTP: the API reads the bearer
// token from a request and asks Store.Authenticate; the keyhook command
// creates, lists and revokes tokens. It must never log, print or return a
// stored token's secret.
package auth
