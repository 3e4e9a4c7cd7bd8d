// Package http1 posts requests over kept-alive HTTP/1.1 connections, on
// the caller's goroutine.
//
// net/http runs two goroutines per connection and hands every request and
// response between them and the caller; at a thousand requests in flight
// to an endpoint answering at once, those handoffs, their scheduling and
// the goroutines' stacks cost more CPU than the syscalls themselves. A
// webhook attempt needs much less than net/http offers: one POST with a
// body already in memory, a status, a few response headers and the first
// bytes of the answer. Here the caller writes the request in one syscall
// and reads the answer on the same goroutine; connections wait in a pool
// per address between requests.
//
// Responses are parsed by net/http's own reader (http.ReadResponse), so
// status lines, headers, chunked bodies, Connection: close and HTTP/1.0
// answers are read exactly as net/http reads them. Only plain TCP is
// spoken: https, redirects and request signing that needs an
// *http.Request stay with net/http (see webhooks.Client).
package http1
