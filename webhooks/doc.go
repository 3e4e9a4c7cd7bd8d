// Package webhooks owns one HTTP delivery: it renders a message into a
// request, signs it, sends it through an egress-safe client, classifies the
// response and retries with exponential backoff until the delivery
// succeeds, becomes final or runs out of budget.
//
// The package knows HTTP and nothing of Kafka: callers describe what to
// deliver as a [Message] (id, key, value, headers, time, and whatever
// attributes they want shown, such as topic and offset) and get back an
// [Attempt] or a [Result]. It does not ack, commit or dead-letter anything;
// it only says which of those the caller should do.
//
// What an endpoint receives is decided here and nowhere else:
//   - the body and metadata of each [Format] ([Encode]): the raw value with
//     Keyhook-* headers, a CloudEvents 1.0 event in binary or structured
//     mode, or a JSON [Envelope]; several envelopes make a [Batch], whose
//     partial-failure answer [ParseBatchResponse] reads;
//   - the Standard Webhooks signature ([Signer]), made at every attempt so
//     its timestamp is fresh, under one or more rotating secrets ([Secret]);
//   - the endpoint's credentials ([Auth]), which never print: static ones,
//     and those FaaS platforms expect, made at attempt time: an AWS SigV4
//     signature ([AWSSigV4]), a Google ID token ([GoogleIDToken]), an
//     OAuth2 client credentials token ([OAuth2ClientCredentials]), a TLS
//     client certificate ([ClientCert]). The [Client] keeps their tokens,
//     AWS credentials and certificate connection pools, keyed by the
//     credentials themselves, so one token serves every delivery until it
//     nears its expiry; token endpoints are egress under the same
//     [AddressPolicy].
//
// And how it is sent:
//   - over which client: http endpoints through package http1
//     (kept-alive HTTP/1.1 connections, the request written and the
//     answer read on the delivering goroutine, about half the CPU of
//     net/http's two goroutines per connection); https endpoints over
//     HTTP/2 through net/http where they choose it in the handshake,
//     else through http1 over TLS (never net/http's HTTP/1
//     connections, see h2first.go); everything else (redirects to
//     follow, client certificates, AWS signatures) and every request
//     when [ClientConfig.NetHTTPOnly] through net/http;
//   - which destination addresses egress may reach ([AddressPolicy]), checked
//     at registration ([AddressPolicy.CheckURL]), again at every connect,
//     after DNS resolution, so a name that later resolves elsewhere (DNS
//     rebinding) is still refused, and before following any redirect;
//   - how many requests one endpoint gets at once ([Limiters]), shrinking
//     when it throttles and growing back when it recovers;
//   - whether an attempt succeeded, should be retried or is final
//     ([Classify]);
//   - how long to wait between attempts ([RetryPolicy], honouring
//     Retry-After), for single requests ([Client.Deliver]) and batches whose
//     partial failures go again under the same budget ([Client.DeliverBatch]);
//     the same engine one attempt at a time ([Retries], [BatchRetries],
//     [Client.Attempt]) for callers that keep the waits themselves, so a
//     request waiting for its retry holds none of their slots.
//
// Each concern of an attempt is one small wrapper around the transport, in
// its own file: tracing (tracing.go), credentials (auth.go, one file per
// kind beside it, their cache in credentials.go), signing (signing.go) and, around whole attempts of a delivery, the endpoint's
// limiter (limiter.go). NewClient chains them in a fixed order.
package webhooks
