// Package console is keyhook's operator console: a few static files
// (one HTML page, ES modules, one stylesheet), embedded in the binary,
// that the API serves at /console/. The page reads the REST API with the
// operator's bearer token, which it keeps in sessionStorage and sends as
// an Authorization header; it is never a cookie or a query parameter.
//
// It owns the files and the headers they are served with: a strict
// Content-Security-Policy (scripts and styles from the console's own
// origin only, nothing inline, nothing framed), X-Frame-Options DENY,
// nosniff and no referrer. Everything the page shows from records and
// answers is set as text, never parsed as HTML.
//
// It must not know how the API is routed or authenticated: it reads
// only what openapi.yaml documents, and holds no credentials.
package console
