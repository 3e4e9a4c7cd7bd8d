// Package subscription owns what a keyhook subscription is: its type, the
// defaults and validation rules that every stored subscription satisfies,
// and the Redis store that holds the set of subscriptions together with the
// change feed that tells every node when that set changes.
//
// The package knows Redis (through go-redis) and the JSON form of a
// subscription. It must not know HTTP, Kafka clients, or how a subscription
// is dispatched: the REST API and the dispatcher build on it, never the
// other way round. Validation here is purely syntactic; whether an
// endpoint's address may be dialled is decided by the webhooks package at
// registration (through the API) and again at dial time.
package subscription
