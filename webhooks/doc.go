// Package webhooks owns one HTTP delivery: it builds the request, sends it
// through an egress-safe client, classifies the response and retries with
// exponential backoff until the delivery succeeds, becomes final or runs out
// of budget.
//
// The package knows HTTP and nothing of Kafka: callers hand it a URL, a body
// and the headers they want sent (delivery id, topic, offset...), and get back
// an [Attempt] or a [Result]. It does not ack, commit or dead-letter anything;
// it only says which of those the caller should do.
//
// Three decisions live here and nowhere else:
//   - which destination addresses egress may reach ([AddressPolicy]), checked
//     at registration ([AddressPolicy.CheckURL]) and again at every connect,
//     after DNS resolution, so a name that later resolves elsewhere (DNS
//     rebinding) is still refused;
//   - whether an attempt succeeded, should be retried or is final
//     ([Classify]);
//   - how long to wait between attempts ([RetryPolicy], honouring
//     Retry-After).
package webhooks
