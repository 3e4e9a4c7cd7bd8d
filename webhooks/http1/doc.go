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
// answers are read exactly as net/http reads them. Requests go over TCP
// or TLS (Request.TLS), offering HTTP/1.1 alone in the handshake; an
// endpoint that refuses it gets ErrNoHTTP1, before anything is written.
// Redirects, client certificates, HTTP/2 and request signing that needs
// an *http.Request stay with net/http (see webhooks.Client).
//
// What net/http's transport guards against, this client guards against
// too (test/hostile runs each against both):
//   - bytes nobody asked for: a connection goes back to the pool only with
//     nothing buffered, and one taken from it is asked first, without
//     waiting, whether a byte or the endpoint's close is there to read
//     (net/http keeps a read posted on every idle connection); over TLS
//     the TLS layer is asked too, and bytes on the socket are read
//     briefly: records of TLS alone (a session ticket sent late, a key
//     update) leave the connection usable, anything else closes it;
//   - a head without end: the status line and headers of the answer and
//     of every informational answer before it are read within one
//     allowance, Config.MaxHeadBytes (net/http's MaxResponseHeaderBytes),
//     and at most 100 informational answers are waited through (net/http
//     counts only their bytes);
//   - replays: a request goes out again, on a new connection, only when
//     nothing of it was written, as net/http does for a POST it may not
//     replay; net/http also replays one carrying an Idempotency-Key when
//     a kept-alive connection broke before any answer, which this client
//     leaves to the caller's next attempt;
//   - a body without end: once the head is read the body gets
//     Config.BodyTimeout, and a connection whose body was not read to its
//     end is closed.
package http1
