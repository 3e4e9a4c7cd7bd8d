// Package schemas decodes the Schema Registry formats of record keys and
// values: Avro, Protobuf and JSON Schema in the Confluent wire format (a
// zero byte, the schema id as 4 big-endian bytes, for Protobuf the message
// indexes, then the encoded value). It owns the node's registry client, a
// bounded cache of parsed schemas by id (a registry never changes the
// schema of an id), the fetches that fill it, and the mapping of each
// format to what expressions see and to the JSON a delivery sends.
//
// A [Registry] never makes its caller wait unless asked: Decode answers
// from the cache, and for an id not cached yet starts a fetch in the
// background and answers an error wrapping recordexpr.ErrNotReady, so that
// a partition's worker never waits on the registry. Wait is the waiting
// variant, for callers that can (a delivery, a test request). A fetch
// that fails for a reason that may pass (an error status of 5xx, 429,
// 401 or 403, a timeout, a refused connection) is retried with backoff for
// as long as the registry runs; an id the registry does not know (404)
// is a decoding failure: the record is dead-lettered with the reason.
//
// It knows nothing of Kafka, Redis or deliveries.
package schemas
