// Package api is keyhook's REST API: one chi router, built by NewRouter,
// that registers, lists, shows and removes subscriptions and reports their
// delivery status. It owns the HTTP side of the contract: request
// decoding with strict limits, the order of checks that guarantees bad
// input changes nothing, and RFC 9457 problem+json for every error.
//
// It must not know how subscriptions are stored, how endpoint addresses
// are judged, or how status is gathered: it consumes those through the
// small interfaces declared here (SubscriptionStore, URLChecker,
// StatusSource), satisfied by subscription.Store, webhooks.AddressPolicy
// and the dispatcher. It knows nothing of Kafka.
package api
