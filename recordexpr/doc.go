// Package recordexpr compiles and evaluates a subscription's CEL
// expressions over one record: the filter, which decides whether the record
// is delivered, and the transform, whose result becomes the body. It owns
// the decoding of keys and values into what expressions see (formats
// "bytes" and "json"; the Schema Registry formats "avro", "protobuf" and
// "json_schema" through the [Decoder]s a [SchemaDecoders] gives, package
// schemas), the variables expressions read, the cost limit that bounds an
// evaluation, and the JSON encoding of a transform's result.
//
// It is pure: no Kafka, no Redis, no HTTP. Callers turn their source (a
// fetched record, a test request) into a [Record] first. A [Program] is safe
// for concurrent use.
//
// Variables:
//
//	key        the decoded key: with key_format "bytes", a string when the
//	           key is UTF-8, bytes when it is not, null when there is none;
//	           with "json", the key's JSON value
//	key_bytes  the raw key (b"" when there is none)
//	headers    map(string, string): the record's headers, the last value of
//	           a repeated name winning
//	value      the decoded value: bytes with value_format "bytes" (b"" for a
//	           tombstone), the JSON value with "json" and "json_schema"
//	           (null for a tombstone); JSON integers are int, other numbers
//	           double; with "avro" records and maps are maps, unions their
//	           branch's value, enums strings, int and long int, bytes and
//	           fixed bytes, decimals strings, timestamps timestamps; with
//	           "protobuf" the proto3 JSON mapping of the message (proto
//	           field names, 64-bit integers as strings, enums as names)
//	topic      string
//	partition  int
//	offset     int
//	timestamp  google.protobuf.Timestamp
package recordexpr
