// Package delivery turns a subscription and a message into the request its
// endpoint receives: the subscription's format (envelopes when it
// batches), its Standard Webhooks signature, its endpoint credentials,
// timeout and redirect allowance. Real deliveries, batches, redrives and
// test deliveries all render through it, so an endpoint that verifies
// signatures or requires credentials sees one shape of request whatever
// sent it.
//
// It knows subscriptions and webhooks; it knows nothing of Kafka, Redis or
// the API. Callers turn their source (a Kafka record, a test request) into
// a [webhooks.Message] first.
package delivery
