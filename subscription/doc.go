// Package subscription owns what a keyhook subscription is: its type, the
// defaults and validation rules that every stored subscription satisfies,
// and the Redis store that holds the set of subscriptions together with the
// change feed that tells every node when that set changes.
//
// The store's changes are atomic Lua scripts that write and announce in
// one step: Create (optionally idempotent, recording the request, without
// its secrets, under the caller's key for 24 hours in the same step),
// Update and Replace (a compare-and-set on the version, which counts
// changes), Delete and DeleteVersion. With a config log (Config.Log) every
// change is recorded there first, and a change the log refuses is not
// made; the Store is also the log's Target for subscriptions
// (SnapshotEntries, RestoreEntry, RemoveEntry), through which a Redis that
// lost subscriptions is rebuilt by version. Page reads the set in a stable order
// with stateless cursors. The package also defines the shapes the API
// exchanges with the control and deadletter packages for operations on a
// subscription's Kafka side (SeekRequest, SeekResult, DeadLetter,
// DeadLetterPage, Status), and validates seeks.
//
// The package knows Redis (through go-redis) and the JSON form of a
// subscription; it borrows the webhooks package's delivery-policy types
// (formats, secrets, endpoint credentials) to validate them. It must not
// know HTTP servers, Kafka clients, or how a subscription is dispatched: the REST API and the dispatcher build on it, never the
// other way round. Validation here is purely syntactic; whether an
// endpoint's address may be dialled is decided by the webhooks package at
// registration (through the API) and again at dial time.
package subscription
