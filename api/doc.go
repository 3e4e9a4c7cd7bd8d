// Package api is keyhook's REST API: one chi router, built by NewRouter,
// that manages the whole life of a subscription (create, list, read,
// replace, patch, delete, pause, resume, seek, test delivery, dead letters
// and redrive), reports delivery status, the delivery log and the live
// nodes, and answers
// health and readiness probes. openapi.yaml, at the repository root, is
// its contract; spec_test.go fails when the router and the spec disagree.
//
// It owns the HTTP side of the contract: bearer-token authentication and
// scopes (what a token may not read it is not shown, not even in the
// answer to its own change), request decoding with strict limits
// (unknown fields, wrong types, read-only fields and null refused, each
// named; numbers read as JSON Schema reads them), the rules that need
// more than one subscription (dead-letter topics) or the stored version
// (credentials follow an endpoint only within its origin), the order of
// checks that guarantees bad input changes nothing, ETags and If-Match,
// Idempotency-Key on create, cursor pagination, and RFC 9457
// problem+json for every error, with stable type URIs.
//
// It must not know how subscriptions or tokens are stored, how endpoint
// addresses are judged, or how status, seeks and dead letters are carried
// out: it consumes those through the small interfaces declared here
// (SubscriptionStore, Authenticator, URLChecker, StatusSource, Seeker,
// DeadLetterSource, NodeLister, Tester), satisfied by subscription.Store,
// auth.Store, webhooks.AddressPolicy, control, deadletter and nodes.Registry.
// It knows nothing of Kafka.
package api
